"""Worker processes that build whole batches into shared-memory slots.

Each worker owns `slots` buffers in anonymous shared memory, mapped before the fork: no names in
/dev/shm to go stale, freed when the last process exits. Batch b goes to worker b % W and slot
(b // W) % slots of it, so slots are reused in order and pixel data is never pickled; only a
small dict of labels and indices travels through the result queue. Workers answer in order per
worker; the consumer reorders across workers, so output order is deterministic.
"""

from __future__ import annotations

import contextlib
import gc
import mmap
import multiprocessing as mp
import os
import queue
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from datapipe.errors import DataError, DatapipeError

_POLL_SECONDS = 0.5


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


def _worker_main(worker_id: int, make_builder: Callable[[], BatchBuilder],
                 slots: list[mmap.mmap], tasks: Any, results: Any) -> None:
    views = [np.frombuffer(s, dtype=np.uint8) for s in slots]
    builder = None
    while True:
        item = tasks.get()
        if item is None:
            return
        slot, task = item
        try:
            builder = builder or make_builder()
            meta = builder.build(task, views[slot])
            results.put((task.generation, task.batch_no, "ok", meta))
        except DataError as exc:
            results.put((task.generation, task.batch_no, "data-error", str(exc)))
        except BaseException:
            results.put((task.generation, task.batch_no, "error",
                         f"worker {worker_id} (pid {os.getpid()}) failed:\n"
                         + traceback.format_exc()))


def _fork_all(processes: list[Any]) -> None:
    """Fork with the parent's objects frozen out of the child's garbage collector.

    Otherwise a child can collect a parent object whose finaliser waits on threads that do
    not exist after a fork (a DALI pipeline does exactly that) and hang before its first task.
    """
    gc.collect()
    gc.freeze()
    try:
        for p in processes:
            p.start()
    finally:
        gc.unfreeze()


class WorkerPool:
    """`num_workers` processes, each with `slots` buffers of `slot_nbytes`."""

    def __init__(self, make_builder: Callable[[], BatchBuilder], num_workers: int, slots: int,
                 slot_nbytes: int) -> None:
        context = mp.get_context("fork")
        self.num_workers = num_workers
        self.slots_per_worker = slots
        self._slots = [[mmap.mmap(-1, max(1, slot_nbytes)) for _ in range(slots)]
                       for _ in range(num_workers)]
        self._views = [[np.frombuffer(s, dtype=np.uint8) for s in ws] for ws in self._slots]
        self._tasks = [context.SimpleQueue() for _ in range(num_workers)]
        self._results = context.Queue()
        self._processes = [
            context.Process(target=_worker_main, daemon=True, name=f"datapipe-worker-{i}",
                            args=(i, make_builder, self._slots[i], self._tasks[i],
                                  self._results))
            for i in range(num_workers)]
        _fork_all(self._processes)
        self._ready: dict[tuple[int, int], tuple[str, Any]] = {}
        self._outstanding: set[tuple[int, int]] = set()

    @property
    def capacity(self) -> int:
        """How many batches may be in flight at once."""
        return self.num_workers * self.slots_per_worker

    def ready_count(self) -> int:
        """Batches finished and waiting for the consumer (what a queue-depth plot shows)."""
        try:
            waiting = self._results.qsize()
        except NotImplementedError:  # macOS
            waiting = 0
        return len(self._ready) + waiting

    def _place(self, ticket: int) -> tuple[int, int]:
        return ticket % self.num_workers, (ticket // self.num_workers) % self.slots_per_worker

    def submit(self, task: BatchTask, ticket: int) -> None:
        """Queue a task; the caller must have consumed ticket - capacity before."""
        worker, slot = self._place(ticket)
        self._outstanding.add((task.generation, task.batch_no))
        self._tasks[worker].put((slot, task))

    def result(self, generation: int, batch_no: int,
               ticket: int) -> tuple[dict[str, Any], np.ndarray]:
        """Wait for batch `batch_no`; returns its metadata and its slot (valid until the slot's
        next task is submitted)."""
        key = (generation, batch_no)
        while key not in self._ready:
            self._receive_one()
        status, payload = self._ready.pop(key)
        self._outstanding.discard(key)
        if status == "data-error":
            raise DataError(payload)
        if status == "error":
            raise WorkerError(payload)
        worker, slot = self._place(ticket)
        return payload, self._views[worker][slot]

    def _receive_one(self) -> None:
        try:
            generation, batch_no, status, payload = self._results.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            self._check_alive()
            return
        if (generation, batch_no) in self._outstanding:
            self._ready[(generation, batch_no)] = (status, payload)

    def drain(self) -> None:
        """Wait out tasks of an abandoned iteration before their slots are reused."""
        while self._outstanding:
            self._receive_one()
            for key in list(self._ready):
                self._ready.pop(key)
                self._outstanding.discard(key)

    def _check_alive(self) -> None:
        for i, p in enumerate(self._processes):
            if p.exitcode is not None:
                raise WorkerError(f"worker {i} (pid {p.pid}) died with exit code {p.exitcode} "
                                  "(killed, out of memory, or crashed in native code)")

    def close(self) -> None:
        for q, p in zip(self._tasks, self._processes, strict=True):
            if p.is_alive():
                with contextlib.suppress(OSError, ValueError):
                    q.put(None)
        for p in self._processes:
            p.join(timeout=2)
            if p.is_alive():
                p.terminate()
                p.join(timeout=2)
        self._results.close()
        self._results.join_thread()
        self._processes = []
