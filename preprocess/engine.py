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
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

from preprocess.ray_engine import RayEngine

C = TypeVar("C")
T = TypeVar("T")
R = TypeVar("R")

ENGINES = ("local", "ray")
# Tasks in flight per worker: enough that no worker waits for the next, few enough that results
# held for ordering (and documents read ahead) stay a small multiple of one task's.
TASKS_AHEAD_PER_WORKER = 4


class Engine(Protocol):
    workers: int
    max_task_inputs: int  # most inputs (images) worth putting in one task

    def map_ordered(self, work: Callable[[C, T], R], context: C,
                    tasks: Iterable[T]) -> Iterator[R]:
        """`work(context, task)` for every task, yielded in task order."""

    def close(self) -> None:
        """Give back the engine's workers."""


def ordered_window(submit: Callable[[T], Any], wait: Callable[[Any], R], tasks: Iterable[T],
                   ahead: int) -> Iterator[R]:
    """Submit up to `ahead` tasks beyond the one awaited, yield their results in order.

    Bounded, unlike Pool.imap: a converter that streams its inputs (text) never reads far ahead
    of what the workers have done."""
    pending: deque[Any] = deque()
    for task in tasks:
        pending.append(submit(task))
        if len(pending) > ahead:
            yield wait(pending.popleft())
    while pending:
        yield wait(pending.popleft())


# One worker per core: a tokenizer's own thread pool would only oversubscribe them.
SINGLE_THREADED = {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}

_context: Any = None


def _install_context(context: Any) -> None:
    global _context
    _context = context
    os.environ.update(SINGLE_THREADED)


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


def _run_with_context(work: Callable[[Any, T], R], task: T) -> R:
    return work(_context, task)


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
        # fork: workers inherit imported modules and the context, so start-up costs
        # milliseconds and the context is never pickled.
        methods = mp.get_all_start_methods()
        mp_context = mp.get_context("fork") if "fork" in methods else mp.get_context()
        pool = mp_context.Pool(self.workers, initializer=_install_context, initargs=(context,))
        try:
            yield from ordered_window(
                lambda task: pool.apply_async(_run_with_context, (work, task)),
                lambda result: result.get(), tasks, self.workers * TASKS_AHEAD_PER_WORKER)
            pool.close()
            pool.join()  # workers leave on their own: a signal would only stop them noisily
        finally:
            pool.terminate()
            pool.join()

    def close(self) -> None:
        """Nothing held between runs: each map starts and ends its own pool."""


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
