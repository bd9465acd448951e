"""Epoch orders and the plans ranks draw from them: the keyed order is a permutation looked up
per place, and a plan's batches follow the strided-share rules (every rank ceil(n / W)
samples, the shortfall repeating the beginning as padding) without any epoch-sized array."""

from __future__ import annotations

import itertools
import math
import time
import tracemalloc

import numpy as np
import pytest

from datapipe.errors import ArgumentError
from datapipe.sampling import ArrayOrder, EpochPlan, KeyedOrder, SampleRemainder
from datapipe.sampling.order import CHUNK_SAMPLES


def _all(order: KeyedOrder | ArrayOrder) -> np.ndarray:
    return order.at(np.arange(len(order)))


def _share(places: np.ndarray, rank: int, world: int) -> tuple[np.ndarray, np.ndarray]:
    """The rules as arrays: `places` padded to a multiple of `world` by repeating its
    beginning (np.resize), rank `rank` taking every world-th entry, padding flagged."""
    n = len(places)
    total = -(-n // world) * world
    padded = np.resize(places, total) if n else places
    return padded[rank::world], np.arange(total)[rank::world] >= n


def _batches(plan: EpochPlan) -> list[tuple[np.ndarray, np.ndarray]]:
    return [plan.batch(b) for b in range(len(plan))]


def test_keyed_order_is_a_pure_function_of_seed_and_epoch() -> None:
    a = _all(KeyedOrder(1000, seed=1, epoch=3, shuffle=True))
    assert np.array_equal(a, _all(KeyedOrder(1000, seed=1, epoch=3, shuffle=True)))
    assert not np.array_equal(a, _all(KeyedOrder(1000, seed=1, epoch=4, shuffle=True)))
    assert not np.array_equal(a, _all(KeyedOrder(1000, seed=2, epoch=3, shuffle=True)))
    assert sorted(a.tolist()) == list(range(1000))
    assert np.array_equal(_all(KeyedOrder(5, 0, 0, shuffle=False)), np.arange(5))


@pytest.mark.parametrize("n, world", [(10, 1), (10, 2), (10, 3), (7, 3), (2, 3), (1, 4),
                                      (0, 2), (103, 8)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_rank_plans_follow_the_share_rules(n: int, world: int, drop_last: bool) -> None:
    """Each rank's batches are its strided share in order (sorted within a batch), padding
    where the share runs past n; together the real samples are the dataset exactly once."""
    for batch in (1, 3, 4):
        rest = SampleRemainder(KeyedOrder(n, 5, 2, True), batch, drop_last)
        whole = _all(rest.order)
        real = []
        for rank in range(world):
            plan = rest.rank_plan(rank, world)
            ids, pad = _share(whole, rank, world)
            steps = len(ids) // batch if drop_last else -(-len(ids) // batch)
            assert len(plan) == steps == rest.batches_per_rank(world)
            for b, (got, got_pad) in enumerate(_batches(plan)):
                want, want_pad = ids[b * batch:(b + 1) * batch], pad[b * batch:(b + 1) * batch]
                assert np.all(np.diff(got) >= 0), "reads grouped: ascending within a batch"
                assert sorted(zip(got.tolist(), got_pad.tolist(), strict=True)) == \
                    sorted(zip(want.tolist(), want_pad.tolist(), strict=True))
                real.extend(got[~got_pad].tolist())
        if not drop_last:
            assert sorted(real) == list(range(n))
        assert len(set(real)) == len(real), "no sample twice"


def test_unshuffled_plans_keep_the_order_within_batches() -> None:
    plan = EpochPlan.build(10, seed=0, epoch=0, shuffle=False, rank=1, world_size=3,
                           batch_size=3, drop_last=False)
    assert [b[0].tolist() for b in _batches(plan)] == [[1, 4, 7], [0]]
    assert [b[1].tolist() for b in _batches(plan)] == [[False] * 3, [True]]


def test_batches_across_chunks_are_the_same_in_any_order_asked() -> None:
    """A plan looks places up a chunk of batches at a time: asked forwards, backwards or at
    random, across chunk boundaries, a batch is the same, and the shares still hold."""
    n, world, batch = 9 * CHUNK_SAMPLES + 11, 3, 100
    rest = SampleRemainder(KeyedOrder(n, 1, 1, True), batch, False)
    plans = [rest.rank_plan(r, world) for r in range(world)]
    forwards = [_batches(p) for p in plans]
    assert len(plans[0]) > 2 * (CHUNK_SAMPLES // batch), "several chunks"
    again = rest.rank_plan(2, world)
    for b in np.random.default_rng(0).permutation(len(again)).tolist():
        assert all(np.array_equal(x, y) for x, y in zip(again.batch(b), forwards[2][b],
                                                        strict=True))
    whole = _all(rest.order)
    for rank, batches in enumerate(forwards):
        ids, _ = _share(whole, rank, world)
        assert sorted(np.concatenate([b[0] for b in batches]).tolist()) == sorted(ids.tolist())


def test_has_and_is_last_bound_the_batches() -> None:
    plan = EpochPlan.build(103, seed=0, epoch=0, shuffle=True, rank=0, world_size=1,
                           batch_size=10, drop_last=False)
    assert len(plan) == 11
    assert [plan.has(b) for b in (-1, 0, 10, 11)] == [False, True, True, False]
    assert [plan.is_last(b) for b in (0, 9, 10)] == [False, False, True]
    with pytest.raises(IndexError):
        plan.batch(11)
    dropped = EpochPlan.build(103, seed=0, epoch=0, shuffle=True, rank=0, world_size=1,
                              batch_size=10, drop_last=True)
    assert len(dropped) == 10 and dropped.is_last(9) and not dropped.has(10)
    empty = EpochPlan.build(0, seed=0, epoch=0, shuffle=True, rank=1, world_size=2,
                            batch_size=4, drop_last=False)
    assert len(empty) == 0 and not empty.has(0) and not empty.is_last(0)


def test_a_rank_outside_the_world_is_refused() -> None:
    with pytest.raises(ArgumentError, match="rank 2 is outside world_size 2"):
        SampleRemainder(KeyedOrder(10, 0, 0, True), 4, False).rank_plan(2, 2)


@pytest.mark.parametrize("segments", [[(2, 3)], [(3, 1), (2, 2)], [(1, 5), (4, 0), (3, 1)]])
@pytest.mark.parametrize("make", [lambda n: KeyedOrder(n, 9, 4, True),
                                  lambda n: ArrayOrder(np.arange(n)[::-1].copy())])
def test_remainders_are_offsets_into_the_order(segments: list[tuple[int, int]], make) -> None:
    """What is left after each segment starts where the segments' draws end (all ranks' first
    k batches are a prefix of the order), and is planned by the same rules."""
    n, batch = 61, 4
    start = SampleRemainder(make(n), batch, False)
    rest, drawn = start, 0
    for world, done in segments:
        drawn = min(n, drawn + done * batch * world)
        rest = rest.after(world, done)
        assert rest.start == drawn and len(rest) == n - drawn and rest.order is start.order
    left = _all(start.order)[drawn:]
    for rank in range(3):
        ids, pad = _share(left, rank, 3)
        got = _batches(rest.rank_plan(rank, 3))
        assert sorted(np.concatenate([g[0] for g in got]).tolist()) == sorted(ids.tolist())
        assert int(sum(g[1].sum() for g in got)) == int(pad.sum())


def test_a_plan_over_a_billion_samples_costs_a_batch() -> None:
    """No epoch-sized array: planning rank 7 of 8 over 10**9 samples, resuming it and taking
    batches costs well under a megabyte (an array of the epoch would be 8 GB)."""
    n = 10**9
    tracemalloc.start()
    try:
        began = time.perf_counter()
        rest = SampleRemainder(KeyedOrder(n, 3, 2, True), 256, False).after(8, 100_000)
        plan = rest.rank_plan(7, 8)
        first, pad = plan.batch(0)
        last = plan.batch(len(plan) - 1)[0]
        elapsed = time.perf_counter() - began
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"{peak:,} bytes"
    assert elapsed < 5, f"{elapsed:.1f} s"  # a sanity bound: it takes milliseconds
    assert len(plan) == math.ceil((n - 256 * 8 * 100_000) / 8 / 256)
    assert len(first) == 256 and not pad.any() and np.all((first >= 0) & (first < n))
    assert len(np.unique(np.concatenate([first, last]))) == len(first) + len(last)


def test_mixture_orders_are_arrays_planned_the_same_way() -> None:
    ids = np.random.default_rng(3).permutation(50) + 1000
    rest = SampleRemainder(ArrayOrder(ids), 4, True)
    for rank, world in itertools.product(range(3), [3]):
        want, _ = _share(ids, rank, world)
        got = np.concatenate([b[0] for b in _batches(rest.rank_plan(rank, world))])
        assert sorted(got.tolist()) == sorted(want[:len(got)].tolist())
