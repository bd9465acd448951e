"""A sample-weighted mixture's epochs, read back from the ranks' batches themselves: stratified
batches, exact totals, streams that up- and down-sample without starving a sample, phases,
accounting, and resume at the same and at other world sizes. Exhaustive on small cases, random
on larger ones."""

from __future__ import annotations

import itertools
import math
import tracemalloc
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest

from datapipe.errors import ArgumentError
from datapipe.format.concat import split_ids
from datapipe.sampling.elastic import Segment
from datapipe.sampling.mixture import Mixture, MixtureRemainder, drawn_in_epoch
from datapipe.sampling.mixture_streams import stream_slice
from datapipe.sampling.mixture_weights import MixtureWeights, WeightSchedule, apportion


def mixture(sizes: tuple[int, ...], weights: tuple[float, ...] | list, batch: int,
            epoch_size: int | None = None, **kw: object) -> Mixture:
    schedule = (WeightSchedule.parse(weights, [str(i) for i in range(len(sizes))])
                if isinstance(weights, list) else
                WeightSchedule.constant(MixtureWeights(weights)))
    return Mixture(sizes, schedule, batch, epoch_size, **kw)  # type: ignore[arg-type]


def batches(rest: MixtureRemainder, world: int,
            upto: int | None = None) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """(rank, batch, sources, local ids) of every real sample, batch by batch."""
    for rank in range(world):
        plan = rest.rank_plan(rank, world)
        for b in range(len(plan) if upto is None else upto):
            ids, pad = plan.batch(b)
            source, local = split_ids(ids[~pad], rest.mixture.offsets)
            yield rank, b, source, local


def drawn(rest: MixtureRemainder, world: int, upto: int | None = None) -> Counter:
    """(source, local) -> times drawn, over all ranks."""
    return Counter((int(s), int(i)) for *_, source, local in batches(rest, world, upto)
                   for s, i in zip(source, local, strict=True))


def whole_order(rest: MixtureRemainder, world: int) -> np.ndarray:
    """The combined ids at every place of what is left, as ranks draw them."""
    order = rest.order(world)
    return order.at(np.arange(len(order)))


def small_cases() -> Iterator[tuple[Mixture, int]]:
    for sizes, weights in [((3, 5), (1, 1)), ((2, 7, 4), (5, 3, 1)), ((6,), (1,)),
                           ((4, 4, 4), (1, 0, 2)), ((1, 9), (0.3, 0.7))]:
        for batch, world, n in itertools.product((1, 2, 3, 5), (1, 2, 3), (1, 7, 12, 30)):
            yield mixture(sizes, weights, batch, n, seed=n), world


def check_stratified(mix: Mixture, world: int, epoch: int = 0, short_bound: int = 2) -> None:
    """Whole batches hold each source within one sample of share x batch size; the batches
    of the last, short step (what the quota leaves) within one where the quota allows it,
    always within two."""
    shares = mix.schedule.phases[0].weights.shares
    whole_steps = mix.samples // (mix.batch_size * world)
    for _, b, source, _ in batches(mix.start(epoch), world):
        counts = np.bincount(source, minlength=len(shares))
        bound = 1 if b < whole_steps else short_bound
        for s, share in enumerate(shares):
            assert abs(counts[s] - len(source) * share) < bound, (mix, world, b, counts)
        if b < whole_steps:
            assert len(source) == mix.batch_size


def test_every_batch_is_stratified_small_cases() -> None:
    for mix, world in small_cases():
        check_stratified(mix, world)


def test_every_batch_is_stratified_random_cases() -> None:
    rng = np.random.default_rng(0)
    for trial in range(40):
        m = int(rng.integers(2, 6))
        sizes = tuple(int(n) for n in rng.integers(1, 400, m))
        weights = tuple(float(w) for w in rng.random(m) * (rng.random(m) > 0.2)) or (1,) * m
        if not any(weights):
            continue
        mix = mixture(sizes, weights, int(rng.integers(1, 70)), int(rng.integers(1, 3000)),
                      seed=trial)
        check_stratified(mix, int(rng.integers(1, 5)), epoch=int(rng.integers(0, 4)))


@pytest.mark.parametrize("batch, world, n", [(3, 3, 5), (3, 3, 14), (8, 4, 38), (8, 3, 77)])
def test_the_short_last_step_is_stratified_where_the_quota_allows(batch: int, world: int,
                                                                   n: int) -> None:
    # Spread evenly as one stretch, these short steps held a source 1.2 samples off its share.
    check_stratified(mixture((30, 30, 30), (0.6, 0.3, 0.1), batch, n), world, short_bound=1)


def test_whole_batches_are_stratified_by_the_phase_in_force() -> None:
    phases = [(0, [1, 1, 1]), (5, [6, 3, 1]), (9, [0, 1, 4])]
    shares = [WeightSchedule.parse(phases, ["a", "b", "c"]).phases[i].weights.shares
              for i in range(3)]
    for world, batch, n in itertools.product((1, 2, 3), (4, 10), (40, 97)):
        mix = mixture((50, 20, 7), phases, batch, n)
        for epoch in range(4):
            whole_steps = n // (batch * world)
            for _, b, source, _ in batches(mix.start(epoch), world):
                step = epoch * mix.steps(world) + b
                share = shares[(step >= 5) + (step >= 9)]
                counts = np.bincount(source, minlength=3)
                if b < whole_steps:
                    assert all(abs(c - batch * w) < 1 for c, w in zip(counts, share,
                                                                      strict=True))


def test_a_rare_source_comes_in_every_batch_it_can_and_never_in_bursts() -> None:
    mix = mixture((10_000, 10_000, 10_000), (0.6, 0.3, 0.1), 64, 64 * 100)
    counts = [np.bincount(source, minlength=3) for *_, source, _ in batches(mix.start(0), 1)]
    assert {int(c[2]) for c in counts} == {6, 7}  # 6.4 per batch: never 0, never a burst
    assert all(c.min() > 0 for c in counts), "no batch is single-source"
    assert [int(c[2]) for c in counts].count(7) == 40  # 0.4 x 100 batches take one more


def test_totals_are_the_largest_remainder_shares_and_the_ranks_step_together() -> None:
    for mix, world in small_cases():
        shares = mix.schedule.phases[0].weights.shares
        seen = drawn(mix.start(0), world)
        per_source = Counter()
        for (s, _), k in seen.items():
            per_source[s] += k
        expected = apportion(mix.samples, shares)
        assert [per_source[s] for s in range(len(shares))] == expected, (mix, world)
        assert list(mix.totals(0, world)) == expected
        steps = {len(mix.start(0).rank_plan(r, world)) for r in range(world)}
        assert steps == {mix.steps(world)}, "every rank runs the same number of steps"


def cumulative_counts(mix: Mixture, world: int, epochs: int, source: int) -> list[np.ndarray]:
    """After each epoch, how often each sample of `source` was drawn so far."""
    total, out = np.zeros(mix.sizes[source], dtype=np.int64), []
    for epoch in range(epochs):
        for (s, i), k in drawn(mix.start(epoch), world).items():
            if s == source:
                total[i] += k
        out.append(total.copy())
    return out


@pytest.mark.parametrize("shuffle", [True, False])
def test_an_up_sampled_source_repeats_a_sample_only_after_all_were_seen(
        shuffle: bool) -> None:
    # Source 1 has 7 samples and a share of 12 per epoch: 1 5/7 passes over it per epoch.
    mix = mixture((40, 7), (2, 1), 4, 36, shuffle=shuffle, seed=3)
    for epoch, counts in enumerate(cumulative_counts(mix, 2, 6, 1)):
        assert counts.max() - counts.min() <= 1, (epoch, counts)
        assert counts.sum() == 12 * (epoch + 1)


def test_a_down_sampled_source_sees_a_new_subset_each_epoch_and_all_of_it() -> None:
    mix = mixture((50, 23), (1, 1), 5, 20, seed=9)  # 10 of 50 per epoch: all in 5 epochs
    counts = cumulative_counts(mix, 3, 5, 0)
    for epoch, c in enumerate(counts):
        assert c.max() - c.min() <= 1 and c.sum() == 10 * (epoch + 1)
    assert counts[-1].min() == 1, "every sample seen once over ceil(50 / 10) epochs"


def test_a_share_equal_to_the_size_draws_each_sample_once() -> None:
    mix = mixture((17, 30, 9), (17, 30, 9), 4)  # weights by size: the concatenation
    for world in (1, 2, 3):
        seen = drawn(mix.start(2), world)
        assert sorted(seen) == [(s, i) for s, n in enumerate(mix.sizes) for i in range(n)]
        assert set(seen.values()) == {1}


def test_the_order_is_a_pure_function_of_its_inputs() -> None:
    def order(seed: int, epoch: int, world: int) -> np.ndarray:
        return whole_order(mixture((100, 40, 7), (5, 3, 2), 8, seed=seed).start(epoch), world)

    assert np.array_equal(order(1, 2, 3), order(1, 2, 3))
    assert not np.array_equal(order(1, 2, 3), order(2, 2, 3))
    assert not np.array_equal(order(1, 2, 3), order(1, 3, 3))


# --- phases ---------------------------------------------------------------------------------


def test_batches_follow_the_phase_in_force_at_their_global_step() -> None:
    # 30 samples, 2 ranks of 3: 5 steps per epoch; phase 2 begins in epoch 1, at its step 2.
    mix = mixture((20, 20), [(0, [1, 1]), (7, [1, 0]), (13, [0, 1])], 3, 30)
    assert mix.steps(2) == 5
    for epoch in range(4):
        for _, b, source, _ in batches(mix.start(epoch), 2):
            step = epoch * 5 + b
            counts = np.bincount(source, minlength=2)
            if step >= 13:
                assert counts[0] == 0, (epoch, b)
            elif step >= 7:
                assert counts[1] == 0, (epoch, b)
            else:
                assert abs(int(counts[0]) - int(counts[1])) <= 1, (epoch, b)


def test_streams_stand_where_the_epochs_before_left_them_across_phases() -> None:
    for phases in ([(0, [1, 1, 1])], [(0, [1, 2, 1]), (4, [3, 0, 1])],
                   [(0, [1, 1, 1]), (3, [0, 1, 0]), (11, [1, 1, 1]), (12, [5, 1, 1])]):
        for world, batch, n in itertools.product((1, 2, 3), (2, 5), (9, 24)):
            mix = mixture((6, 11, 4), phases, batch, n, drop_last=world == 3)
            running = np.zeros(3, dtype=np.int64)
            for epoch in range(7):
                assert list(mix.drawn_before(epoch, world)) == list(running), (phases, epoch)
                running += mix.totals(epoch, world)
            # Each source's places over the epochs (drawn, or dropped by drop_last as any
            # epoch's tail is) walk one stream: no sample twice before all once.
            places = np.concatenate([whole_order(mix.start(e), world) for e in range(7)])
            for s in range(3):
                source, local = split_ids(places, mix.offsets)
                walk = local[source == s]
                for k in range(len(walk)):
                    count = np.bincount(walk[:k + 1], minlength=mix.sizes[s])
                    assert count.max() - count.min() <= 1, (phases, world, s, k)


# --- accounting and resume ------------------------------------------------------------------


@pytest.mark.parametrize("drop_last", [False, True])
def test_samples_drawn_per_source_are_counted_without_replay(drop_last: bool) -> None:
    mix = mixture((30, 12, 5), (4, 2, 1), 3, 40, drop_last=drop_last)
    start = mix.start(1)
    for world in (1, 2, 3):
        for done in range(start.batches_per_rank(world) + 1):
            counts = Counter(s for (s, _), k in drawn(start, world, done).items()
                             for _ in range(k))
            assert list(drawn_in_epoch(start, [], world, done)) == [counts[s] for s in range(3)]


def test_a_resumed_epoch_gives_exactly_the_batches_not_drawn_yet() -> None:
    """A loader resumes with its counters alone: the plan of a mixture built anew from the
    same settings has, from any batch on, the very batches the first run would have had."""
    whole = list(batches(mixture((30, 12, 5), (4, 2, 1), 3, 40, seed=5).start(2), 2))
    for done in range(mixture((30, 12, 5), (4, 2, 1), 3, 40).steps(2) + 1):
        resumed = mixture((30, 12, 5), (4, 2, 1), 3, 40, seed=5).start(2)
        again = [x for x in batches(resumed, 2) if x[1] >= done]
        expected = [x for x in whole if x[1] >= done]
        assert len(again) == len(expected)
        for x, y in zip(again, expected, strict=True):
            assert x[:2] == y[:2] and np.array_equal(x[2], y[2]) and np.array_equal(x[3], y[3])


@pytest.mark.parametrize("worlds", [(2, 3), (3, 2), (1, 4), (2, 3, 2), (4, 1)])
def test_resumed_at_other_world_sizes_each_drawn_sample_stays_drawn(
        worlds: tuple[int, ...]) -> None:
    for mix in (mixture((30, 12, 5), (4, 2, 1), 3, 40), mixture((9, 9), (1, 3), 2, 31),
                mixture((8, 6), [(0, [1, 1]), (2, [1, 0])], 2, 14)):
        start = mix.start(1)
        for done in itertools.product(*(range(start.batches_per_rank(w) + 1)
                                        for w in worlds[:-1])):
            lineage = [Segment(w, k) for w, k in zip(worlds, done, strict=False)]
            # With phases an epoch's samples depend on the world it is planned for: the
            # first that drew anything.
            first = next((w for w, k in zip(worlds, done, strict=False) if k), worlds[-1])
            epoch = drawn(start, first)
            seen, rest = Counter(), start
            for segment in lineage:
                if segment.batches_done > rest.batches_per_rank(segment.world_size):
                    break
                seen += drawn(rest, segment.world_size, segment.batches_done)
                rest = rest.after(segment.world_size, segment.batches_done)
            else:
                seen += drawn(rest, worlds[-1])
                assert seen == epoch, (mix, lineage, "per-source counts and samples kept")
                counts = drawn_in_epoch(start, lineage, worlds[-1],
                                        rest.batches_per_rank(worlds[-1]))
                assert list(counts) == list(mix.totals(1, first))


def test_what_is_left_after_a_resize_is_stratified_again() -> None:
    mix = mixture((300, 300, 300), (0.6, 0.3, 0.1), 10, 600)
    rest = mix.start(0).after(2, 7)
    left = rest.left
    assert sum(left) == 600 - 2 * 7 * 10
    whole_steps = sum(left) // (10 * 3)
    for _, b, source, _ in batches(rest, 3):
        if b < whole_steps:
            counts = np.bincount(source, minlength=3)
            assert all(abs(c - 10 * n / sum(left)) < 1 for c, n in zip(counts, left,
                                                                      strict=True))


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("kw, message", [
    ({"sizes": (3, 0)}, "source 1 is empty"),
    ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
    ({"epoch_size": 0}, "epoch_size must be >= 1 samples, got 0"),
    ({"sizes": (3, 3, 3)}, "weights has 2 weights for 3 sources"),
])
def test_bad_settings_are_refused_in_one_line(kw: dict, message: str) -> None:
    args = {"sizes": (3, 4), "schedule": WeightSchedule.constant(MixtureWeights((1, 1))),
            "batch_size": 2, **kw}
    with pytest.raises(ArgumentError, match=message):
        Mixture(**args)


def test_shares_are_never_rounded_through_floats() -> None:
    # 0.1 + 0.2 + 0.7: a batch of 10 holds exactly 1, 2 and 7, every time.
    mix = mixture((100, 100, 100), (0.1, 0.2, 0.7), 10, 300)
    for *_, source, _ in batches(mix.start(0), 3):
        assert list(np.bincount(source, minlength=3)) == [1, 2, 7]
    assert math.isclose(sum(mix.totals(0, 3)), 300)


def test_the_identity_names_what_a_saved_state_must_match() -> None:
    a = mixture((10, 5), [(0, [3, 1]), (40, [1, 1])], 4).identity()
    assert a == {"mixture_sizes": [10, 5], "weights": [[0, [3, 1]], [40, [1, 1]]],
                 "epoch_size": 15}
    assert mixture((10, 5), [(0, [3, 1]), (40, [1, 2])], 4).identity() != a
    assert mixture((10, 5), [(0, [3, 1]), (40, [1, 1])], 4, 16).identity() != a
    assert mixture((10, 6), [(0, [3, 1]), (40, [1, 1])], 4, 15).identity() != a


@pytest.mark.parametrize("shuffle", [True, False])
def test_a_large_source_streams_whole_permutations_sliced_anywhere(shuffle: bool) -> None:
    # Above the block size a source's permutations are computed per position: any slicing of
    # its stream gives the same entries, and each cycle holds every sample once.
    size = (1 << 16) + 77
    whole = stream_slice(size, 5, 1, size - 1000, size + 2000, shuffle)
    parts = [stream_slice(size, 5, 1, size - 1000 + lo, 700, shuffle)
             for lo in range(0, size + 2000, 700)]
    assert np.array_equal(np.concatenate(parts)[:size + 2000], whole)
    cycle = whole[1000:1000 + size]
    assert np.array_equal(np.sort(cycle), np.arange(size))
    assert shuffle == (not np.array_equal(cycle, np.arange(size)))
    other = stream_slice(size, 5, 1, 2 * size, size, shuffle)
    assert shuffle == (not np.array_equal(other, cycle)), "each cycle its own permutation"


def test_a_slice_of_a_huge_source_costs_what_the_slice_holds() -> None:
    tracemalloc.start()
    try:
        part = stream_slice(10**9, 0, 0, 3 * 10**9 - 500, 1000, True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(set(part[:500].tolist())) == 500 and part.max() < 10**9
    assert peak < 1 << 20, f"{peak:,} bytes for a slice of 1,000"
