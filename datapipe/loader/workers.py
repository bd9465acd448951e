"""Worker processes that build whole batches into shared-memory slots.

Slots come from a `SlotTable` (see slots.py): each task names the slot to fill, so pixel data
is never pickled; only a small dict of labels and indices travels through the result queue.
Task b goes to worker b % W; the consumer reorders results by batch number, so output order is
deterministic whichever worker finishes first.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import os
import queue
import socket
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from datapipe.errors import ArgumentError, DataError, DatapipeError
from datapipe.loader.lifetime import Lifeline, become_worker, close_at_exit, closed, signals_held
from datapipe.loader.slots import SlotTable, WorkerSlots, send_slot

_POLL_SECONDS = 0.5
_NO_SLOT = None  # a message that only retires slots
# Free slots kept beyond those in flight: for the batch being handed out while the caller still
# holds the previous one, so a steady loop never makes or retires buffers.
SPARE_SLOTS = 2


class BatchBuilder(Protocol):
    def build(self, task: BatchTask, out: np.ndarray) -> dict[str, Any]:
        """Fill `out` (the slot, as uint8) with the batch; return the small metadata."""


@dataclass(frozen=True)
class BatchTask:
    generation: int
    batch_no: int
    epoch: int
    indices: np.ndarray
    is_pad: np.ndarray
    extra: dict[str, Any] | None = None  # plan-specific arrays (token ranges, rows)


def worker_timing(started: float, ended: float, stages: dict[str, float]) -> dict[str, Any]:
    """What a builder reports of its own time: wall span (perf_counter is system-wide on Linux,
    so spans from different processes line up on one timeline) and seconds per stage."""
    return {"pid": os.getpid(), "start": started, "end": ended, "stages": stages}


class WorkerError(DatapipeError):
    """A worker failed or died; carries the worker's traceback."""


class WorkerCause(Exception):
    """What caused a user error in a worker, as its traceback text: the exception itself may
    not survive pickling. Chained to the error raised in the loader's process."""


def _portable(exc: DatapipeError) -> tuple[type[DatapipeError], str, str | None]:
    """A user error as it crosses to the loader's process: its class, its one line, and its
    cause's traceback."""
    cause = exc.__cause__
    text = "".join(traceback.format_exception(cause)) if cause is not None else None
    return (ArgumentError if isinstance(exc, ArgumentError) else DataError), str(exc), text


def _worker_main(worker_id: int, make_builder: Callable[[], BatchBuilder],
                 inherited: dict[int, Any], channel: socket.socket | None, tasks: Any,
                 results: Any, lifeline: Lifeline) -> None:
    become_worker(lifeline)
    slots = WorkerSlots(inherited, channel)
    builder = None
    while True:
        item = tasks.get()
        if item is None:
            return
        ref, retired, task = item
        slots.forget(retired)
        if task is None:
            continue
        try:
            builder = builder or make_builder()
            meta = builder.build(task, slots.view(ref))
            results.put((task.generation, task.batch_no, "ok", meta))
        except DatapipeError as exc:
            results.put((task.generation, task.batch_no, "user-error", _portable(exc)))
        except BaseException:
            results.put((task.generation, task.batch_no, "error",
                         f"worker {worker_id} (pid {os.getpid()}) failed:\n"
                         + traceback.format_exc()))


def _fork_all(processes: list[Any]) -> None:
    """Fork with the parent's objects frozen out of the child's garbage collector.

    Otherwise a child can collect a parent object whose finaliser waits on threads that do
    not exist after a fork (a DALI pipeline does exactly that) and hang before its first task.
    Signals are held across the fork until the child has dropped the parent's handlers.
    No gc.collect() first (as Python's docs advise for fork without exec): a full collection
    of a training process's heap cost 0.05-0.13 s of every epoch's first batch, and garbage
    frozen into a child is shared, not copied.
    """
    gc.freeze()
    try:
        with signals_held():
            for p in processes:
                p.start()
    finally:
        gc.unfreeze()


class WorkerPool:
    """`num_workers` processes with up to `num_workers x prefetch` batches in flight."""

    def __init__(self, make_builder: Callable[[], BatchBuilder], num_workers: int,
                 prefetch: int, slot_nbytes: int) -> None:
        context = mp.get_context("fork")
        self.num_workers = num_workers
        self.capacity = num_workers * prefetch  # how many batches may be in flight at once
        self._slots = SlotTable(slot_nbytes, spare=SPARE_SLOTS,
                                prefork=self.capacity + SPARE_SLOTS)
        self._tasks = [context.SimpleQueue() for _ in range(num_workers)]
        self._results = context.Queue()
        inherited = self._slots.prefork_buffers()
        # One socket pair per worker, for handing over memfds of slots made after the fork.
        pairs = [socket.socketpair() if self._slots.zero_copy else (None, None)
                 for _ in range(num_workers)]
        self._channels = [ours for ours, _ in pairs]
        self._known: list[set[int]] = [set() for _ in range(num_workers)]  # slots each has
        lifeline = Lifeline.here()
        self._owner_pid = lifeline.parent_pid
        self._closed = False
        self._processes = [
            context.Process(target=_worker_main, daemon=True, name=f"datapipe-worker-{i}",
                            args=(i, make_builder, inherited, theirs, self._tasks[i],
                                  self._results, lifeline))
            for i, (_, theirs) in enumerate(pairs)]
        _fork_all(self._processes)
        close_at_exit(self)
        for _, theirs in pairs:
            if theirs is not None:
                theirs.close()
        self._ready: dict[tuple[int, int], tuple[str, Any]] = {}
        self._outstanding: dict[tuple[int, int], int] = {}  # task -> slot id
        self._building: dict[tuple[int, int], int] = {}  # task -> its worker, until it reports
        self._load = [0] * num_workers  # tasks each worker has queued or is building
        self._submitted = 0

    def ready_count(self) -> int:
        """Batches finished and waiting for the consumer (what a queue-depth plot shows)."""
        try:
            waiting = self._results.qsize()
        except NotImplementedError:  # macOS
            waiting = 0
        return len(self._ready) + waiting

    def submit(self, task: BatchTask) -> None:
        ref = self._slots.acquire()
        retired = self._slots.retire_surplus()
        key = (task.generation, task.batch_no)
        self._outstanding[key] = ref.id
        worker = self._least_loaded()
        self._building[key] = worker
        self._load[worker] += 1
        self._submitted += 1
        if retired:  # every worker may have mapped them
            for i, q in enumerate(self._tasks):
                self._known[i].difference_update(retired)
                if i != worker:
                    q.put((_NO_SLOT, retired, None))
        if ref.fd is not None and ref.id not in self._known[worker]:
            send_slot(self._channels[worker], ref)  # before the task that names it
            self._known[worker].add(ref.id)
        self._tasks[worker].put((ref, retired, task))

    def _least_loaded(self) -> int:
        """The worker with the fewest tasks queued or being built (ties in turn). Batches come
        out in order within a window of `capacity`: dealt round-robin, a worker that runs
        slower (one sharing its core with the training process, say) falls behind until the
        window is full of its batches and the others wait; dealt by load, it gets fewer."""
        while self._receive_one(block=False):  # reports already sent lighten their workers
            pass
        start = self._submitted % self.num_workers
        order = list(range(start, self.num_workers)) + list(range(start))
        return min(order, key=self._load.__getitem__)

    def result(self, generation: int, batch_no: int) -> tuple[dict[str, Any], torch.Tensor]:
        """Wait for batch `batch_no`; returns its metadata and its slot as a uint8 tensor,
        which keeps the slot from reuse for as long as it (or a view of it) lives."""
        key = (generation, batch_no)
        while key not in self._ready:
            self._receive_one()
        status, payload = self._ready.pop(key)
        slot_id = self._outstanding.pop(key)
        if status != "ok":
            self._slots.release(slot_id)
            if status == "user-error":
                kind, message, cause = payload
                raise kind(message) from (WorkerCause(cause) if cause else None)
            raise WorkerError(payload)
        return payload, self._slots.lease(slot_id)

    def _receive_one(self, block: bool = True) -> bool:
        """Take one worker's report (waiting up to a poll interval when `block`); whether
        there was one."""
        try:
            generation, batch_no, status, payload = self._results.get(block, _POLL_SECONDS)
        except queue.Empty:
            if block:
                self._check_alive()
            return False
        worker = self._building.pop((generation, batch_no), None)
        if worker is not None:
            self._load[worker] -= 1
        if (generation, batch_no) in self._outstanding:
            self._ready[(generation, batch_no)] = (status, payload)
        return True

    def drain(self) -> None:
        """Wait out tasks of an abandoned iteration before their slots are reused."""
        while self._outstanding:
            self._receive_one()
            for key in list(self._ready):
                self._ready.pop(key)
                self._slots.release(self._outstanding.pop(key))

    def _check_alive(self) -> None:
        for i, p in enumerate(self._processes):
            if p.exitcode is not None:
                raise WorkerError(f"worker {i} (pid {p.pid}) died with exit code {p.exitcode} "
                                  "(killed, out of memory, or crashed in native code)")

    def forget_inherited(self) -> None:
        """In a process forked from the owner: these workers are not this process's children."""
        children = getattr(mp.process, "_children", set())
        for p in self._processes:
            children.discard(p)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._processes if p.pid is not None]

    def close(self) -> None:
        if os.getpid() != self._owner_pid or self._closed:
            return  # closed, or a copy in another forked process: not its workers to stop
        self._closed = True
        closed(self)
        for q, p in zip(self._tasks, self._processes, strict=True):
            if p.is_alive():
                with contextlib.suppress(OSError, ValueError):
                    q.put(None)
        for p in self._processes:
            p.join(timeout=2)
            if p.is_alive():
                p.terminate()
                p.join(timeout=2)
            if p.is_alive():
                p.kill()
                p.join(timeout=2)
        self._results.close()
        self._results.join_thread()
        self._processes = []
        self._slots.close()
        for channel in self._channels:
            if channel is not None:
                channel.close()
