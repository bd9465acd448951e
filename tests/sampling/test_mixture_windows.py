"""A mixture's order computed a window at a time, checked place by place against the order
planned whole (tests/sampling/mixture_reference.py, the first implementation): many sizes,
weights (tiny shares too), phases that begin mid-epoch, drop_last, world sizes 1 to 8, batch
sizes, shuffle on and off, several epochs, and elastic chains. Then the pieces that make a
window computable alone (the floor sum, per-group counts), and what a plan costs at 10^9."""

from __future__ import annotations

import itertools
import time
import tracemalloc
from collections.abc import Iterator

import numpy as np
import pytest

from datapipe.sampling import mixture_windows
from datapipe.sampling.elastic import Segment
from datapipe.sampling.lattice import floor_sum, residues_below
from datapipe.sampling.mixture import Mixture, MixtureRemainder, drawn_in_epoch
from datapipe.sampling.mixture_parts import Part, PartCounts, whole_batches_quota
from datapipe.sampling.mixture_ranks import rank_places
from datapipe.sampling.mixture_streams import spread_counts, stream_at, stream_slice
from datapipe.sampling.mixture_weights import MixtureWeights, WeightSchedule, apportion
from datapipe.sampling.order import ArrayOrder, SampleRemainder
from tests.sampling.mixture_reference import WholeRemainder


def mixture(sizes: tuple[int, ...], weights: tuple[float, ...] | list, batch: int,
            epoch_size: int | None = None, **kw: object) -> Mixture:
    schedule = (WeightSchedule.parse(weights, [str(i) for i in range(len(sizes))])
                if isinstance(weights, list) else
                WeightSchedule.constant(MixtureWeights(weights)))
    return Mixture(sizes, schedule, batch, epoch_size, **kw)  # type: ignore[arg-type]


def whole(rest: MixtureRemainder, world: int) -> np.ndarray:
    order = rest.order(world)
    return order.at(np.arange(len(order)))


def random_mixture(rng: np.random.Generator, trial: int) -> Mixture:
    count = int(rng.integers(1, 6))
    sizes = tuple(int(n) for n in rng.choice([1, 3, 17, 200, 5000, 70_000], count))
    weights = [float(w) for w in rng.random(count) * (rng.random(count) > 0.2)]
    if rng.random() < 0.3:
        weights[int(rng.integers(count))] = 1e-3  # a tiny share: a sample every few batches
    if not any(weights):
        weights[0] = 1.0
    if rng.random() < 0.3:  # phases beginning mid-epoch, some the epochs after
        later = [float(w) + 0.1 for w in rng.random(count)]
        weights = [(0, weights), (int(rng.integers(1, 40)), later)]
    return mixture(sizes, tuple(weights) if isinstance(weights[0], float) else weights,
                   int(rng.integers(1, 40)), int(rng.integers(1, 4000)), seed=trial,
                   drop_last=bool(rng.random() < 0.3), shuffle=bool(rng.random() < 0.8))


def chains(rng: np.random.Generator, trials: int) -> Iterator[tuple[Mixture, int, list]]:
    """(mixture, epoch, [(world, batches done), ...]): an epoch resumed at other sizes."""
    for trial in range(trials):
        mix = random_mixture(rng, trial)
        steps = [(int(rng.integers(1, 9)), float(rng.random())) for _ in range(3)]
        yield mix, int(rng.integers(0, 4)), steps


@pytest.mark.parametrize("window", [64, 1000, mixture_windows.WINDOW_PLACES])
def test_the_windowed_order_is_the_whole_epochs_order(window: int,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mixture_windows, "WINDOW_PLACES", window)
    for mix, epoch, steps in chains(np.random.default_rng(window), 60):
        rest, want = mix.start(epoch), WholeRemainder(mix, epoch)
        for world, fraction in steps:
            assert np.array_equal(whole(rest, world), want.order(world)), (mix, epoch, world)
            done = int(fraction * (rest.batches_per_rank(world) + 1))
            assert list(rest.drawn(world, done)) == list(want.drawn(world, done))
            rest, want = rest.after(world, done), want.after(world, done)
            if want.pools is not None:
                assert list(rest.left) == [len(p) for p in want.pools]


def test_small_cases_exhaustively() -> None:
    for sizes, weights in [((3, 5), (1, 1)), ((2, 7, 4), (5, 3, 1)), ((6,), (1,)),
                           ((4, 4, 4), (1, 0, 2)), ((1, 9), (0.3, 0.7)),
                           ((50, 20, 7), [(0, [1, 1, 1]), (5, [6, 3, 1]), (9, [0, 1, 4])])]:
        for batch, world, n, drop in itertools.product((1, 2, 3, 5), (1, 2, 3, 4, 8),
                                                       (1, 7, 12, 30, 97), (False, True)):
            mix = mixture(sizes, weights, batch, n, seed=n, drop_last=drop)
            for epoch in (0, 2):
                rest, want = mix.start(epoch), WholeRemainder(mix, epoch)
                assert np.array_equal(whole(rest, world), want.order(world)), (mix, world)


def test_rank_plans_give_the_whole_orders_batches_padding_included(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Small windows: a rank's chunk spans several, and its padding wraps to the first.
    monkeypatch.setattr(mixture_windows, "WINDOW_PLACES", 50)
    for mix, epoch, steps in chains(np.random.default_rng(7), 25):
        world = steps[0][0]
        rest = mix.start(epoch).after(world, 1).after(steps[1][0], 1)
        want = WholeRemainder(mix, epoch).after(world, 1).after(steps[1][0], 1)
        ids = want.order(steps[2][0])
        for rank in range(steps[2][0]):
            got = rest.rank_plan(rank, steps[2][0])
            expected = SampleRemainder(ArrayOrder(ids), mix.batch_size, mix.drop_last,
                                       mix.shuffle).rank_plan(rank, steps[2][0])
            assert len(got) == len(expected)
            for b in range(len(got)):
                for x, y in zip(got.batch(b), expected.batch(b), strict=True):
                    assert np.array_equal(x, y), (mix, rank, b)


def test_progress_counts_match_the_plans_over_elastic_chains() -> None:
    for mix, epoch, steps in chains(np.random.default_rng(11), 40):
        lineage = [Segment(w, int(f * (2 + w))) for w, f in steps[:2]]
        rest = WholeRemainder(mix, epoch)
        total = np.zeros(len(mix.sizes), dtype=np.int64)
        for segment in lineage:
            if segment.batches_done > mix.start(epoch).batches_per_rank(segment.world_size):
                break
            total += rest.drawn(segment.world_size, segment.batches_done)
            rest = rest.after(segment.world_size, segment.batches_done)
        else:
            world = steps[2][0]
            want = total + rest.drawn(world, 3)
            got = drawn_in_epoch(mix.start(epoch), lineage, world, 3)
            assert list(got) == list(want), (mix, lineage)


def test_what_is_left_after_a_resize_is_a_start_and_a_count_per_source() -> None:
    mix = mixture((300, 300, 300), (0.6, 0.3, 0.1), 10, 600, seed=4)
    rest = mix.start(0).after(2, 7)
    drawn = mix.start(0).drawn(2, 7)
    assert sum(drawn) == 140 and list(rest.left) == list(mix.totals(0, 2) - drawn)
    assert list(rest.starts) == list(mix.drawn_before(0, 2) + drawn)


# --- what makes a window computable alone ---------------------------------------------------


def test_floor_sum_is_the_sum_of_floors() -> None:
    rng = np.random.default_rng(0)
    for _ in range(3000):
        n, m, a, b = (int(x) for x in rng.integers(0, 60, 4))
        m += 1
        assert floor_sum(n, m, a, b) == sum((a * i + b) // m for i in range(n)), (n, m, a, b)
    big = 10**18 + 7  # Python ints: no overflow
    assert floor_sum(5, big, big - 1, big - 2) == sum(((big - 1) * i + big - 2) // big
                                                      for i in range(5))


def test_residues_below_counts_the_stride_lattice() -> None:
    for modulus in (1, 2, 7, 12, 31):
        for step in range(modulus):
            for count in range(modulus + 1):
                for bound in range(modulus + 1):
                    want = sum((q * step) % modulus < bound for q in range(count))
                    assert residues_below(count, step, modulus, bound) == want


def test_group_counts_are_spread_counts_rows_and_their_sums() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        count = int(rng.integers(1, 6))
        weights = MixtureWeights(tuple(float(w) for w in rng.random(count) + 1e-3))
        batch, units = int(rng.integers(1, 30)), int(rng.integers(1, 300))
        part = Part(0, units, 0, weights.shares, tuple(apportion(units * batch,
                                                                 weights.shares)))
        table = spread_counts(units, batch, part.shares, whole_batches_quota(part, batch))
        counts = PartCounts.of(part, batch)
        first, size = sorted(int(x) for x in rng.integers(0, units + 1, 2))
        assert np.array_equal(counts.groups(first, size - first), table[first:size])
        for groups in (0, first, size, units):
            assert list(counts.before(groups)) == list(table[:groups].sum(axis=0))


def test_a_ranks_places_follow_from_the_units_counts() -> None:
    """rank_places against the places laid out whole: step by step, units side by side."""
    rng = np.random.default_rng(5)
    for _ in range(300):
        steps, world = int(rng.integers(0, 4)), int(rng.integers(1, 7))
        count, batch = int(rng.integers(1, 5)), int(rng.integers(1, 9))
        table = np.array([np.bincount(rng.integers(0, count, batch), minlength=count)
                          for _ in range(steps * world)], dtype=np.int64)
        table = table.reshape(steps, world, count)
        laid = np.repeat(np.tile(np.arange(count), steps * world), table.ravel())
        places = laid.reshape(steps, world, batch).transpose(0, 2, 1).ravel()
        within = np.zeros(len(places), dtype=np.int64)
        for s in range(count):
            within[places == s] = np.arange(int((places == s).sum()))
        for rank in range(world):
            source, index = rank_places(table, rank)
            assert np.array_equal(source, places[rank::world]), (table, rank)
            assert np.array_equal(index, within[rank::world]), (table, rank)


@pytest.mark.parametrize("size", [7, 5000, (1 << 16) + 77])
@pytest.mark.parametrize("shuffle", [True, False])
def test_stream_entries_at_scattered_positions_are_the_slices(size: int,
                                                              shuffle: bool) -> None:
    # Across several blocks of a small source's permutations, or cycles of a large one's.
    start, count = abs(size - 500), 3 * max(size, 1 << 16)
    whole = stream_slice(size, 3, 1, start, count, shuffle)
    positions = np.sort(np.random.default_rng(size).choice(count, 40, replace=False))
    got = stream_at(size, 3, 1, start + positions, shuffle)
    assert np.array_equal(got, whole[positions])


# --- scale ----------------------------------------------------------------------------------


def test_a_plan_over_a_billion_samples_costs_a_window() -> None:
    """Sources of 10^9 and 10^6 samples: rank 0 of 8's first batch, and the first batch after
    a resume at another world size, without an array the size of the epoch (~9 GB)."""
    mix = mixture((10**9, 10**6), (0.7, 0.3), 256, seed=1)
    tracemalloc.start()
    try:
        began = time.perf_counter()
        ids, pad = mix.start(0).rank_plan(0, 8).batch(0)
        rest = mix.start(0).after(8, 123_457).after(3, 1000)
        plan = rest.rank_plan(2, 5)
        later, _ = plan.batch(len(plan) // 2)
        elapsed = time.perf_counter() - began
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 1.0, f"{elapsed:.2f} s"
    assert peak < 50 << 20, f"{peak:,} bytes"
    assert len(ids) == 256 and not pad.any()
    source = (ids >= 10**9).sum()
    assert source in (76, 77), "0.3 x 256 of the small source in a whole batch"
    assert sum(rest.left) == mix.samples - 8 * 256 * 123_457 - 3 * 256 * 1000
    assert len(np.unique(np.concatenate([ids, later]))) == 512
