"""The shard prefetcher's look-ahead: the shards the next batches read, in order of need, up to
its budget, found by walking only the batches ahead (a plan of 10^9 samples has millions)."""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest

from datapipe.loader.prefetch import ShardWalk, upcoming_shards
from datapipe.sampling.order import ArrayOrder, KeyedOrder, SampleRemainder


def _whole_walk(plan, starts: np.ndarray, batch: int, sizes: np.ndarray, budget: int,
                window: tuple[int, int] | None = None) -> list[int]:
    """The look-ahead by its definition: every batch from `batch` to the end, in order, each
    batch's shards (ascending) taken while they fit the budget (always one)."""
    chosen: list[int] = []
    total = 0
    for b in range(batch, len(plan)):
        ids = plan.batch(b)[0]
        if window is not None:
            ids = ids[(ids >= window[0]) & (ids < window[1])] - window[0]
        for k in np.unique(np.searchsorted(starts, ids, side="right") - 1).tolist():
            if k in chosen:
                continue
            if chosen and total + sizes[k] > budget:
                return chosen
            chosen.append(k)
            total += int(sizes[k])
    return chosen


@pytest.mark.parametrize("shuffle", [True, False])
def test_the_look_ahead_is_the_whole_walks_beginning(shuffle: bool) -> None:
    rows = np.array([7, 30, 1, 12, 50, 9, 41, 20, 3, 27])
    starts = np.concatenate([[0], np.cumsum(rows)])
    sizes = rows * 1000
    rest = SampleRemainder(KeyedOrder(int(rows.sum()), 4, 1, shuffle), 8, False, shuffle)
    plan = rest.rank_plan(1, 3)
    walk = ShardWalk(plan, starts)
    # Forwards as a loader goes, then back to the start (a new pass over the same epoch).
    for batch in [*range(len(plan) + 1), 0, 3]:
        for budget in (1, 40_000, 90_000, 10**9):
            assert upcoming_shards(walk, batch, sizes, budget) == \
                _whole_walk(plan, starts, batch, sizes, budget), (batch, budget)


def test_a_mixtures_source_looks_ahead_at_its_own_ids() -> None:
    rows = np.array([5, 5, 5, 5])
    starts = np.concatenate([[0], np.cumsum(rows)])
    ids = np.random.default_rng(2).permutation(60)  # 0..19 another source's, 20..39 this one's
    plan = SampleRemainder(ArrayOrder(ids), 4, False).rank_plan(0, 2)
    walk = ShardWalk(plan, starts, (20, 40))
    for batch in range(len(plan)):
        assert upcoming_shards(walk, batch, rows, 10) == \
            _whole_walk(plan, starts, batch, rows, 10, (20, 40))


@pytest.mark.parametrize("shards, budget", [(10_000, 500), (10, 10**12)])
def test_a_billion_sample_plan_walks_only_the_batches_ahead(shards: int, budget: int) -> None:
    """Shards of 50 bytes: a budget of 10 of them stops the walk within a few batches, and a
    budget that holds every shard stops it once each is chosen (a shuffled batch of 256 reads
    all 10 at once); the walk of the whole plan would be 488,282 batches."""
    n = 10**9
    starts = np.arange(shards + 1, dtype=np.int64) * (n // shards)
    sizes = np.full(shards, 50)
    plan = SampleRemainder(KeyedOrder(n, 0, 0, True), 256, False).rank_plan(3, 8)
    walk = ShardWalk(plan, starts)
    tracemalloc.start()
    try:
        began = time.perf_counter()
        first = upcoming_shards(walk, 100_000, sizes, budget)
        later = upcoming_shards(walk, 100_001, sizes, budget)
        elapsed = time.perf_counter() - began
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(first) == len(later) == 10
    assert first == walk.shards(100_000).tolist()[:10], "the next batch's shards first"
    assert peak < 2_000_000, f"{peak:,} bytes"
    assert elapsed < 5, f"{elapsed:.1f} s"  # a sanity bound: it takes milliseconds
