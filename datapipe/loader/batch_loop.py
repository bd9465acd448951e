"""The part every loader shares: turn an epoch plan into built batches, in order.

With workers, up to `workers x prefetch` batches are built ahead; with none, each batch is built
in the calling process when asked for. Either way batch b comes out as the b-th batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import count
from typing import Any, Protocol

import numpy as np
import torch

from datapipe.loader.memory_budget import check_buffers_fit
from datapipe.loader.workers import SPARE_SLOTS, BatchBuilder, BatchTask, WorkerPool


class Plan(Protocol):
    """What a producer needs of an epoch plan. A plan need not know its length up front (a
    token plan finds its end when it plans its last window): the producer asks `has(b)`."""

    def has(self, b: int) -> bool: ...

    def is_last(self, b: int) -> bool: ...

    def batch(self, b: int) -> tuple[np.ndarray, np.ndarray]: ...

    def extra(self, b: int) -> dict[str, Any] | None: ...

_generations = count()


@dataclass
class _Stream:
    """One epoch's batches as submitted to the pool."""

    plan: Plan
    epoch: int
    generation: int
    next_batch: int


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
        self.started_at: float | None = None  # when worker processes were started
        self._in_flight = 0   # submitted, not yet handed out
        self._carry: _Stream | None = None  # the next epoch, already started

    def check_memory(self, owner: str, batch: str, remedy: str) -> None:
        """Refuse, before any worker starts, batch buffers that cannot all fit in memory
        (`batch`: what one buffer holds; `remedy`: the settings that shrink them)."""
        if self.num_workers:
            count = self.num_workers * self.prefetch + SPARE_SLOTS
            why = (f"{self.num_workers} workers x prefetch {self.prefetch} in flight, "
                   f"+ {SPARE_SLOTS} spare")
        else:
            count, why = 2, "the batch being built and the one the caller holds"
        check_buffers_fit(owner, batch, self.slot_nbytes, why, count, remedy)

    def batches(self, plan: Plan, epoch: int, start: int,
                upcoming: Callable[[], tuple[Plan, int]] | None = None,
                ) -> Iterator[tuple[dict, torch.Tensor]]:
        """Yield (metadata, slot) for batches start, start + 1, ... while the plan has them.
        The slot is a uint8 tensor over the batch's bytes; it is not reused while it, or a
        view of it, is alive.

        `upcoming()` names the plan and epoch most likely to follow: once this epoch is fully
        submitted, free workers start on it, so a new epoch does not begin with an empty queue.
        If the next call asks for something else, that work is discarded.
        """
        if self.num_workers == 0:
            yield from self._inline(plan, epoch, start)
            return
        pool = self._pool or self._start_pool()
        current = self._take_carry(plan, epoch, start) or self._new_stream(plan, epoch, start,
                                                                           pool)
        following: _Stream | None = None
        try:
            b = start
            while plan.has(b):
                following = self._top_up(pool, current, following, upcoming)
                ready = pool.ready_count()
                meta, slot = pool.result(current.generation, b)
                self._in_flight -= 1
                meta["queue"] = {"ready": ready, "capacity": pool.capacity}
                if plan.is_last(b):
                    # Now, not after the loop: a caller that knows len() (Lightning) never
                    # asks past the last batch, and the next epoch's work would be dropped.
                    self._carry = following
                yield meta, slot
                b += 1
        finally:
            if not self.persistent:
                self.close()

    def _new_stream(self, plan: Plan, epoch: int, start: int, pool: WorkerPool) -> _Stream:
        pool.drain()  # an abandoned iteration's tasks must finish before slots are reused
        self._in_flight, self._carry = 0, None
        return _Stream(plan, epoch, next(_generations), start)

    def _take_carry(self, plan: Plan, epoch: int, start: int) -> _Stream | None:
        """The next epoch's stream started early, if it is this one (the same plan object: a
        state loaded since may have made the epoch's plan another one)."""
        carry, self._carry = self._carry, None
        if carry is not None and carry.plan is plan and carry.epoch == epoch and start == 0:
            return carry
        return None

    def _top_up(self, pool: WorkerPool, current: _Stream, following: _Stream | None,
                upcoming: Callable[[], tuple[Plan, int]] | None) -> _Stream | None:
        """Submit until `capacity` tasks are in flight: this epoch first, then the next."""
        while self._in_flight < pool.capacity:
            if current.plan.has(current.next_batch):
                stream = current
            elif upcoming is not None:
                if following is None:
                    following = _Stream(*upcoming(), next(_generations), 0)
                if not following.plan.has(following.next_batch):
                    break
                stream = following
            else:
                break
            b = stream.next_batch
            pool.submit(_task(stream.plan, stream.generation, b, stream.epoch))
            self._in_flight += 1
            stream.next_batch += 1
        return following

    def _inline(self, plan: Plan, epoch: int, start: int) -> Iterator[tuple[dict, Any]]:
        self._builder = self._builder or self.make_builder()
        b = start
        while plan.has(b):
            buffer = torch.empty(self.slot_nbytes, dtype=torch.uint8)
            meta = self._builder.build(_task(plan, -1, b, epoch), buffer.numpy())
            meta["queue"] = {"ready": 0, "capacity": 0}
            yield meta, buffer
            b += 1

    def _start_pool(self) -> WorkerPool:
        self.started_at = time.perf_counter()
        self._pool = WorkerPool(self.make_builder, self.num_workers, self.prefetch,
                                self.slot_nbytes)
        return self._pool

    @property
    def worker_pids(self) -> list[int]:
        return self._pool.pids if self._pool is not None else []

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._in_flight, self._carry = 0, None


def _task(plan: Plan, generation: int, b: int, epoch: int) -> BatchTask:
    indices, is_pad = plan.batch(b)
    return BatchTask(generation=generation, batch_no=b, epoch=epoch, indices=indices,
                     is_pad=is_pad, extra=plan.extra(b))
