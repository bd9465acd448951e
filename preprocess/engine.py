"""Where a converter's per-input work runs: local processes, or tasks on a Ray cluster.

A converter splits its inputs into tasks (a range of images, a batch of documents) and hands the
engine a module-level function `work(context, task)`. The engine yields the results in task
order, so shard boundaries, and so the output bytes, depend on the inputs alone and never on
the engine, the number of workers or the scheduling. The context (input list, settings,
tokenizer) reaches each worker once, not with every task: inherited by forked processes, put
once in Ray's object store.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from multiprocessing import connection
from multiprocessing.connection import Connection
from multiprocessing.pool import ExceptionWithTraceback  # type: ignore[attr-defined]
from typing import Any, TypeVar

from datapipe.errors import DatapipeError
from preprocess.engine_base import SINGLE_THREADED, Engine
from preprocess.ray_engine import RayEngine

C = TypeVar("C")
T = TypeVar("T")
R = TypeVar("R")

ENGINES = ("local", "ray")
# Tasks in flight per worker: enough that no worker waits for the next, few enough that results
# held for ordering (and documents read ahead) stay a small multiple of one task's.
TASKS_AHEAD_PER_WORKER = 4
# Tasks queued in each worker's pipe beyond the one it runs: it never waits for the next.
QUEUED_PER_WORKER = 2


@contextlib.contextmanager
def _single_threaded() -> Iterator[None]:
    """SINGLE_THREADED in this process for a while, as a worker has it for good."""
    saved = {name: os.environ.get(name) for name in SINGLE_THREADED}
    os.environ.update(SINGLE_THREADED)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# This process's ends of its workers' pipes: a forked worker closes its copies, else a
# sibling's pipe would stay open after this process dies and that sibling would wait forever.
_parent_ends: list[Connection] = []


def _serve(conn: Connection, work: Callable[[Any, Any], Any], context: Any) -> None:
    """A worker: tasks in, results (or the exception, with its traceback) out, in order, until
    told to stop or this process's parent is gone. Ctrl-C is the parent's to handle."""
    for end in _parent_ends:
        end.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.update(SINGLE_THREADED)
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    threading.Thread(target=_take_tasks, args=(conn, inbox), daemon=True).start()
    while (message := inbox.get()) is not None:
        number, task = message
        try:
            reply = (number, True, work(context, task))
        except Exception as exc:
            reply = (number, False, ExceptionWithTraceback(exc, exc.__traceback__))
        try:
            conn.send(reply)
        except (BrokenPipeError, ConnectionResetError):
            return
        except Exception as exc:  # a result that cannot be pickled
            conn.send((number, False, RuntimeError(f"unpicklable result: {exc}")))


def _take_tasks(conn: Connection, inbox: queue.SimpleQueue[Any]) -> None:
    """Read tasks as they come, so the parent's send never waits on a worker that is itself
    waiting to send it a result (a deadlock, once both pipes' buffers are full)."""
    try:
        while (message := conn.recv()) is not None:
            inbox.put(message)
    except (EOFError, OSError):  # the parent is gone
        pass
    inbox.put(None)


class _Workers:
    """Forked processes, each fed through a pipe of its own by the calling thread, which also
    reads the results as they arrive. No helper threads: multiprocessing.Pool's three (its
    worker handler wakes up for every result waiting in the pipe) cost the process that
    writes the shards CPU time and the GIL."""

    def __init__(self, count: int, work: Callable[[Any, Any], Any], context: Any) -> None:
        methods = mp.get_all_start_methods()
        # fork: workers inherit imported modules and the context, so start-up costs
        # milliseconds and the context is never pickled.
        mp_context = mp.get_context("fork") if "fork" in methods else mp.get_context()
        self.conns: list[Connection] = []
        self.processes: list[Any] = []
        try:
            for _ in range(count):
                parent, child = mp_context.Pipe()
                _parent_ends.append(parent)
                self.conns.append(parent)
                process = mp_context.Process(target=_serve, args=(child, work, context),
                                              daemon=True)
                process.start()
                child.close()
                self.processes.append(process)
        except BaseException:
            self.stop(finished=False)
            raise
        self.queued = [0] * count

    def send(self, worker: int, number: int, task: Any) -> None:
        try:
            self.conns[worker].send((number, task))
        except OSError:  # BrokenPipeError, ConnectionResetError: it is gone
            raise self._died(worker) from None
        self.queued[worker] += 1

    def receive(self) -> list[tuple[int, bool, Any]]:
        """The replies that have arrived, waiting for at least one."""
        busy = [conn for conn, queued in zip(self.conns, self.queued, strict=True) if queued]
        replies = []
        for conn in connection.wait(busy):
            worker = self.conns.index(conn)
            try:
                replies.append(conn.recv())
            except (EOFError, OSError):
                raise self._died(worker) from None
            self.queued[worker] -= 1
        return replies

    def _died(self, worker: int) -> DatapipeError:
        process = self.processes[worker]
        process.join(1)
        return DatapipeError(f"a conversion worker (pid {process.pid}) died (exit code "
                             f"{process.exitcode}); the journal keeps what was finished")

    def stop(self, finished: bool) -> None:
        """Finished: workers leave on their own (no signal reaches them); else terminated."""
        for conn, process in zip(self.conns, self.processes, strict=False):
            if finished:
                with contextlib.suppress(OSError):
                    conn.send(None)
            elif process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join()
        for conn in self.conns:
            conn.close()
            _parent_ends.remove(conn)


def _ordered_replies(workers: _Workers, tasks: Iterable[T], window: int) -> Iterator[Any]:
    """Each task to the least loaded worker, at most `window` beyond the one awaited; the
    results yielded in task order (a task's exception raised in its turn)."""
    tasks = iter(tasks)
    replies: dict[int, tuple[bool, Any]] = {}
    submitted = done = 0
    more = True
    while True:
        while more and submitted - done < window and \
                min(workers.queued) <= QUEUED_PER_WORKER:
            task = next(tasks, _END)
            if task is _END:
                more = False
                break
            workers.send(workers.queued.index(min(workers.queued)), submitted, task)
            submitted += 1
        if done == submitted:
            return
        while done not in replies:
            replies.update((n, (ok, value)) for n, ok, value in workers.receive())
        ok, value = replies.pop(done)
        done += 1
        if not ok:
            raise value
        yield value


_END = object()


class LocalEngine:
    """Forked worker processes on this machine; with one worker, the calling process itself."""

    max_task_inputs = 16

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)

    def map_ordered(self, work: Callable[[C, T], R], context: C,
                    tasks: Iterable[T]) -> Iterator[R]:
        if self.workers == 1:
            with _single_threaded():
                yield from (work(context, task) for task in tasks)
            return
        workers = _Workers(self.workers, work, context)
        finished = False
        try:
            yield from _ordered_replies(workers, tasks, self.workers * TASKS_AHEAD_PER_WORKER)
            finished = True
        finally:
            workers.stop(finished)

    def close(self) -> None:
        """Nothing held between runs: each map starts and ends its own workers."""


def make_engine(name: str, workers: int, address: str | None = None) -> Engine:
    """The engine `--engine NAME` names; `address` only applies to Ray."""
    from datapipe.errors import ArgumentError

    if name == "local":
        if address is not None:
            raise ArgumentError("--address applies only to --engine ray")
        return LocalEngine(workers)
    if name == "ray":
        return RayEngine(address, workers)
    raise ArgumentError(f"--engine: {name!r} is not one of {ENGINES}")
