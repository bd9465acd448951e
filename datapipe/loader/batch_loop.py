"""The part every loader shares: turn an epoch plan into built batches, in order.

With workers, up to `workers x prefetch` batches are built ahead; with none, each batch is built
in the calling process when asked for. Either way batch b comes out as the b-th batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from itertools import count
from typing import Any, Protocol

import numpy as np

from datapipe.loader.workers import BatchBuilder, BatchTask, WorkerPool


class Plan(Protocol):
    """What a producer needs of an epoch plan."""

    def __len__(self) -> int: ...

    def batch(self, b: int) -> tuple[np.ndarray, np.ndarray]: ...

    def extra(self, b: int) -> dict[str, Any] | None: ...

_generations = count()


class BatchProducer:
    def __init__(self, make_builder: Callable[[], BatchBuilder], num_workers: int,
                 prefetch: int, slot_nbytes: int, persistent: bool) -> None:
        self.make_builder = make_builder
        self.num_workers = num_workers
        self.prefetch = prefetch
        self.slot_nbytes = slot_nbytes
        self.persistent = persistent
        self._pool: WorkerPool | None = None
        self._builder: BatchBuilder | None = None
        self._buffer: np.ndarray | None = None
        self.started_at: float | None = None  # when worker processes were started

    def batches(self, plan: Plan, epoch: int, start: int) -> Iterator[tuple[dict, np.ndarray]]:
        """Yield (metadata, slot) for batches start..len(plan)-1. A slot stays valid until the
        generator is resumed."""
        if self.num_workers == 0:
            yield from self._inline(plan, epoch, start)
            return
        pool = self._pool or self._start_pool()
        pool.drain()
        generation = next(_generations)
        submitted = start
        try:
            for b in range(start, len(plan)):
                # Keep the pool full; batch b's slot is free again once batch b-capacity is done.
                while submitted < len(plan) and submitted < b + pool.capacity:
                    pool.submit(_task(plan, generation, submitted, epoch))
                    submitted += 1
                ready = pool.ready_count()
                meta, slot = pool.result(generation, b)
                meta["queue"] = {"ready": ready, "capacity": pool.capacity}
                yield meta, slot
        finally:
            if not self.persistent:
                self.close()

    def _inline(self, plan: Plan, epoch: int, start: int) -> Iterator[tuple[dict, Any]]:
        self._builder = self._builder or self.make_builder()
        if self._buffer is None:
            self._buffer = np.empty(self.slot_nbytes, dtype=np.uint8)
        for b in range(start, len(plan)):
            meta = self._builder.build(_task(plan, -1, b, epoch), self._buffer)
            meta["queue"] = {"ready": 0, "capacity": 0}
            yield meta, self._buffer

    def _start_pool(self) -> WorkerPool:
        self.started_at = time.perf_counter()
        self._pool = WorkerPool(self.make_builder, self.num_workers, self.prefetch,
                                self.slot_nbytes)
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def _task(plan: Plan, generation: int, b: int, epoch: int) -> BatchTask:
    indices, is_pad = plan.batch(b)
    return BatchTask(generation=generation, batch_no=b, epoch=epoch, indices=indices,
                     is_pad=is_pad, extra=plan.extra(b))
