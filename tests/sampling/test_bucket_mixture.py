"""Bucketed mixtures: each batch one bucket's images of its sources' own buckets, each source its
weight's quota of the epoch (every image once with the default weights, over any number of
ranks), a down-sampled source walking through all of each of its buckets over the epochs, the
same global sequence at any world size, what was drawn counted by formula, phases, and a plan
that costs what its batches hold at any size."""

from __future__ import annotations

import collections
import time
import tracemalloc

import numpy as np
import pytest

from datapipe.errors import ArgumentError
from datapipe.sampling.bucket_mixture import BucketMixture, bucket_entries
from datapipe.sampling.elastic import Segment, follow
from datapipe.sampling.index_shuffle import IndexShuffle, round_keys, shuffle_many
from datapipe.sampling.mixture import Mixture, split_ids
from datapipe.sampling.mixture_weights import MixtureWeights, WeightSchedule, apportion

# Images per bucket of each source: source 0 mostly in buckets 0 and 3, source 1 with an
# empty bucket and one holding a single image, source 2 small.
TABLE = ((10, 290, 1, 699), (0, 40, 1, 16), (3, 2, 0, 2))
BATCH_SIZES = (4, 8, 16, 32)


def _mix(weights: tuple[float, ...] | None = None, epoch_size: int | None = None,
         drop_last: bool = False, shuffle: bool = True, seed: int = 0,
         schedule: WeightSchedule | None = None, batch_size: int = 8) -> BucketMixture:
    sizes = tuple(sum(row) for row in TABLE)
    if schedule is None:
        schedule = WeightSchedule.constant(MixtureWeights(weights or sizes))
    mixture = Mixture(sizes, schedule, batch_size, epoch_size, drop_last, seed, shuffle)
    ids = tuple(np.random.default_rng(s).permutation(n).astype(np.uint32)
                for s, n in enumerate(sizes))
    return BucketMixture(mixture, ids, TABLE, BATCH_SIZES, drop_last)


def _bucket_of(mix: BucketMixture) -> dict[tuple[int, int], int]:
    """(source, local id) -> its bucket, from the sources' indexes."""
    out = {}
    for s, (ids, counts) in enumerate(zip(mix.ids, TABLE, strict=True)):
        bounds = np.cumsum((0, *counts))
        for k in range(len(counts)):
            out.update({(s, int(i)): k for i in ids[bounds[k]:bounds[k + 1]]})
    return out


def _epoch_batches(mix: BucketMixture, epoch: int, world: int, rest=None) -> list[tuple]:
    """Every rank's batches of the epoch: (bucket, source, local ids, padding)."""
    rest = rest or mix.start(epoch)
    out = []
    for rank in range(world):
        plan = rest.rank_plan(rank, world)
        for b in range(len(plan)):
            ids, pad = plan.batch(b)
            source, local = split_ids(ids, mix.mixture.offsets)
            out.append((plan.extra(b)["bucket"], source, local, pad))
    return out


def _drawn(batches: list[tuple]) -> collections.Counter:
    return collections.Counter((int(s), int(i)) for _, source, local, pad in batches
                               for s, i in zip(source[~pad], local[~pad], strict=True))


@pytest.mark.parametrize("world", [1, 2, 3])
def test_default_weights_give_every_image_once_per_epoch_each_batch_one_bucket(
        world: int) -> None:
    mix = _mix()
    bucket_of = _bucket_of(mix)
    plans = [mix.start(1).rank_plan(r, world) for r in range(world)]
    assert len({len(p) for p in plans}) == 1  # every rank the same steps
    batches = _epoch_batches(mix, 1, world)
    for k, source, local, _ in batches:
        assert len(local) == BATCH_SIZES[k]
        assert {bucket_of[int(s), int(i)] for s, i in zip(source, local, strict=True)} == {k}
    assert _drawn(batches) == collections.Counter(bucket_of.keys())


def test_without_shuffle_every_epoch_is_the_same_batches() -> None:
    mix = _mix(shuffle=False)
    epochs = [_epoch_batches(mix, e, 2) for e in range(2)]
    assert _drawn(epochs[0]) == collections.Counter(_bucket_of(mix).keys())
    assert all(k0 == k1 and np.array_equal(l0, l1) for (k0, _, l0, _), (k1, _, l1, _)
               in zip(*epochs, strict=True))


def test_each_source_gives_its_weights_quota_spread_over_its_buckets_by_their_sizes() -> None:
    mix = _mix(weights=(1, 2, 1), epoch_size=1000)
    bucket_of = _bucket_of(mix)
    for epoch in range(4):
        drawn = _drawn(_epoch_batches(mix, epoch, 2))
        per_source = np.bincount([s for s, _ in drawn.elements()], minlength=3)
        assert per_source.tolist() == apportion(1000, MixtureWeights((1, 2, 1)).shares) \
            == mix.mixture.totals(epoch, 2).tolist()
        for s, counts in enumerate(TABLE):
            got = np.bincount([bucket_of[key] for key in drawn.elements() if key[0] == s],
                              minlength=4)
            want = per_source[s] * np.asarray(counts) / sum(counts)
            assert np.abs(got - want).max() <= 2, (epoch, s, got, want)


def test_a_down_sampled_source_walks_through_all_its_images_before_any_repeats() -> None:
    mix = _mix(weights=(500, 57, 7), epoch_size=564)  # source 0: half of it each epoch
    seen = _drawn(_epoch_batches(mix, 0, 1)) + _drawn(_epoch_batches(mix, 1, 1))
    source0 = {key: n for key, n in seen.items() if key[0] == 0}
    assert len(source0) == 1000 and set(source0.values()) == {1}


def test_up_sampled_sources_cycle_each_bucket_whole() -> None:
    mix = _mix(weights=(1, 1, 1), epoch_size=3 * 70)  # source 2 (7 images): 10 times over
    drawn = _drawn(_epoch_batches(mix, 0, 1))
    assert {n for key, n in drawn.items() if key[0] == 2} == {10}


def test_the_global_sequence_is_the_same_at_any_world_size() -> None:
    mix = _mix(weights=(3, 2, 1), epoch_size=700)
    one = mix.start(2).rank_plan(0, 1)
    three = [mix.start(2).rank_plan(r, 3) for r in range(3)]
    for g in range(len(one)):
        plan, b = three[g % 3], g // 3
        assert plan.extra(b) == one.extra(g)
        assert all(np.array_equal(x, y) for x, y in zip(plan.batch(b), one.batch(g),
                                                         strict=True))


def test_a_resume_at_another_world_size_draws_what_was_left_once() -> None:
    mix = _mix()
    start = mix.start(0)
    head = [start.rank_plan(r, 2) for r in range(2)]
    first = _drawn([(0, *split_ids(p.batch(b)[0], mix.mixture.offsets), p.batch(b)[1])
                    for p in head for b in range(7)])
    rest = follow(start, [Segment(2, 7)], 0)
    tail = _drawn(_epoch_batches(mix, 0, 3, rest))
    assert first + tail == collections.Counter(_bucket_of(mix).keys())
    assert rest.epoch.drawn(rest.drawn).sum() == sum(first.values())


def test_drawn_counts_the_real_images_of_the_first_batches_by_formula() -> None:
    mix = _mix(weights=(2, 1, 1), epoch_size=900, drop_last=True)
    epoch = mix.epoch(3, 1)
    plan = mix.start(3).rank_plan(0, 1)
    counts = np.zeros(3, dtype=np.int64)
    for b in range(len(plan)):
        assert np.array_equal(epoch.drawn(b), counts), b
        ids, pad = plan.batch(b)
        counts += np.bincount(split_ids(ids[~pad], mix.mixture.offsets)[0], minlength=3)
    assert np.array_equal(epoch.drawn(len(plan)), counts)
    assert len(plan) == epoch.total


def test_a_phase_switches_the_sources_where_its_samples_begin() -> None:
    # Step 10 of 8 samples: the first 80 of each 200-sample epoch from source 0, then source 1.
    schedule = WeightSchedule.parse([(0, [1, 0, 0]), (10, [0, 1, 0])], ["a", "b", "c"])
    mix = _mix(epoch_size=200, schedule=schedule)
    batches = _epoch_batches(mix, 0, 1)
    sources = [set(source[~pad].tolist()) for _, source, _, pad in batches]
    switch = sources.index({1})
    assert all(s == {0} for s in sources[:switch]) and all(s == {1} for s in sources[switch:])
    assert sum((~pad).sum() for _, _, _, pad in batches[:switch]) == 80
    later = _drawn(_epoch_batches(mix, 1, 1))  # every later epoch: source 1 alone
    assert {s for s, _ in later} == {1}


def test_bucket_entries_count_whole_cycles_then_the_even_merge() -> None:
    counts = np.array([3, 0, 5, 2])
    assert bucket_entries(counts, 0).tolist() == [0, 0, 0, 0]
    assert bucket_entries(counts, 10).tolist() == [3, 0, 5, 2]
    assert bucket_entries(counts, 25).tolist() == [8, 0, 12, 5]  # 2 cycles, then 5 slots


def test_many_shuffles_asked_at_once_are_the_keyed_shuffles_asked_one_by_one() -> None:
    sizes = [1, 2, 7, 64, 1025, 5000]
    shuffles = [IndexShuffle(n, [3, n]) for n in sizes]
    n = np.repeat(sizes, sizes)
    positions = np.concatenate([np.arange(k) for k in sizes])
    keys = np.concatenate([np.tile(s.keys, (k, 1)) for s, k in zip(shuffles, sizes,
                                                                      strict=True)])
    order = np.random.default_rng(0).permutation(len(n))  # any order, any mix of shuffles
    got = np.empty(len(n), dtype=np.int64)
    got[order] = shuffle_many(n[order], keys[order], positions[order])
    want = np.concatenate([s(np.arange(k)) for s, k in zip(shuffles, sizes, strict=True)])
    assert np.array_equal(got, want)
    streams = round_keys(np.arange(4), (9, 9))
    assert len({tuple(row) for row in streams.tolist()}) == 4  # a stream's keys are its own
    first = shuffle_many(np.full(64, 64), np.tile(streams[0], (64, 1)), np.arange(64))
    assert sorted(first.tolist()) == list(range(64))


def test_a_plan_costs_what_its_batches_hold_at_any_size() -> None:
    def first_batches(size: int) -> float:
        table = ((size // 3, size // 3, size - 2 * (size // 3), 0), (5, 0, 0, 5), (1, 1, 1, 1))
        sizes = tuple(sum(row) for row in table)
        ids = tuple(np.broadcast_to(np.uint32(0), (n,)) for n in sizes)  # no memory per id
        mixture = Mixture(sizes, WeightSchedule.constant(MixtureWeights((8, 1, 1))), 32)
        t0 = time.perf_counter()
        mix = BucketMixture(mixture, ids, table, (32, 32, 32, 32), False)
        plan = mix.start(5).rank_plan(3, 8)
        for b in range(50):
            plan.batch(b)
        return time.perf_counter() - t0

    first_batches(100_000)  # imports, caches
    small, huge = first_batches(100_000), first_batches(4_000_000_000)
    assert huge < 5 * small + 0.05, (small, huge)
    tracemalloc.start()
    try:
        first_batches(4_000_000_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak  # a chunk of batches' arrays, nothing per image


def test_a_bucket_index_that_does_not_match_its_source_is_refused() -> None:
    mix = _mix()
    with pytest.raises(ArgumentError, match="source 1's bucket index holds"):
        BucketMixture(mix.mixture, mix.ids, (TABLE[0], (0, 40, 1, 15), TABLE[2]), BATCH_SIZES,
                      False)
