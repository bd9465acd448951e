"""Phases of weights for a token mixture, placed at positions in the weights' unit: each
stretch of an epoch follows the phase in force over it, quotas follow the shares without drift
across a switch, and the streams' positions are summed arithmetically (a phase after 10,000
epochs costs no more than one after two)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from datapipe.errors import ArgumentError
from datapipe.sampling import mixture_spans
from datapipe.sampling.mixture_spans import drawn_before, epoch_quota
from datapipe.sampling.mixture_tokens import TokenMixture
from datapipe.sampling.mixture_weights import MixtureWeights, Phase, WeightSchedule, apportion
from tests.sampling.test_mixture_tokens import (
    draws_per_document,
    packed,
    spread,
    tokens_per_batch,
    whole_epoch,
)

Phases = list[tuple[int, tuple[float, ...]]]


def schedule(phases: Phases) -> WeightSchedule:
    return WeightSchedule(tuple(Phase(start, MixtureWeights(w)) for start, w in phases))


def phased(sizes: tuple[int, ...], phases: Phases, longest: int = 4000, seed: int = 0,
           **kw: object) -> TokenMixture:
    rng = np.random.default_rng(seed)
    lengths = tuple(rng.integers(1, longest, n).astype(np.uint32) for n in sizes)
    return TokenMixture(lengths, schedule(phases), seed=seed, **kw)  # type: ignore[arg-type]


def shares_of(weights: tuple[float, ...]) -> np.ndarray:
    return np.array(weights) / sum(weights)


@pytest.mark.parametrize("epoch, into", [(0, 175), (3, 120)])
def test_the_batches_before_a_switch_follow_the_first_weights_and_after_it_the_second(
        epoch: int, into: int) -> None:
    budget, first, second = 16_384, (0.6, 0.3, 0.1), (0.2, 0.3, 0.5)
    size = budget * 350
    switch = into * budget  # in the epoch, from its start
    mix = phased((3000, 800, 50), [(0, first), (epoch * size + switch, second)], 4000,
                 epoch_size=size)
    documents = whole_epoch(mix, epoch)
    tokens = tokens_per_batch(packed(documents, budget), documents.source, 3)
    running = np.vstack([np.zeros(3), np.cumsum(tokens, axis=0)])
    at = running.sum(axis=1)  # where each batch begins in the epoch, in tokens
    window = running[100:] - running[:-100]
    share = window / window.sum(axis=1, keepdims=True)
    # A span's documents are counted from its tokens' expectation: the switch lands within a
    # few batches of where it was named (the spread of the first span's lengths).
    margin = 3 * budget
    before, after = at[100:] <= switch - margin, at[:-100] >= switch + margin
    assert before.sum() >= 20 and after.sum() >= 20
    assert np.abs(share[before] - shares_of(first)).max() <= 0.03
    assert np.abs(share[after] - shares_of(second)).max() <= 0.03


def exact_amounts(phases: Phases, lo: int, hi: int) -> np.ndarray:
    """The integral of each source's share over positions lo .. hi - 1, as exact fractions."""
    total = np.zeros(len(phases[0][1]), dtype=object)
    for (start, weights), end in zip(phases, [p[0] for p in phases[1:]] + [hi], strict=True):
        overlap = min(hi, end) - max(lo, start)
        if overlap > 0:
            total += np.array([Fraction(overlap) * s for s in MixtureWeights(weights).shares])
    return total


@pytest.mark.parametrize("weight_by", ["tokens", "documents"])
def test_quotas_follow_the_shares_over_a_switch_and_streams_follow_quotas_without_drift(
        weight_by: str) -> None:
    size = 400_000 if weight_by == "tokens" else 300
    phases: Phases = [(0, (5, 3, 2)), (size * 2 // 5, (1, 1, 6)),
                      (3 * size + size * 7 // 10, (2, 0, 1))]
    mix = phased((500, 120, 9), phases, 2000, weight_by=weight_by, epoch_size=size)
    running = np.zeros(3, dtype=np.int64)
    for epoch in range(8):
        lo, hi = epoch * size, (epoch + 1) * size
        spans = mix.schedule.spans(lo, size)
        quota = np.array(mix.epoch_quota(epoch))
        assert quota.sum() == size
        assert np.all(np.abs(quota - exact_amounts(phases, lo, hi)) < len(spans))
        documents = whole_epoch(mix, epoch)
        before = documents.tokens_before if weight_by == "tokens" else \
            documents.documents_before
        assert list(before) == list(running)
        amount = documents.lengths if weight_by == "tokens" else np.ones(len(documents.lengths))
        running += np.bincount(documents.source, weights=amount, minlength=3).astype(np.int64)
        mark = np.array(drawn_before(mix.schedule, epoch + 1, size))
        assert np.all(mark == np.sum([mix.epoch_quota(e) for e in range(epoch + 1)], axis=0))
        if weight_by == "documents":
            assert list(running) == list(mark), "documents exactly"
        else:  # the documents whose expected tokens are the marks: the spread of a sample
            assert all(abs(running[s] - mark[s]) <= spread(mix, s, len(mix.lengths[s]))
                       for s in range(3))


def test_where_the_streams_stand_is_the_sum_of_the_quotas_epoch_by_epoch() -> None:
    rng = np.random.default_rng(5)
    for _ in range(30):
        size = int(rng.integers(1, 50))
        starts = np.unique(rng.integers(1, 12 * size, int(rng.integers(1, 6))))
        if rng.random() < 0.5:  # a phase at an epoch's first position
            starts = np.unique(np.append(starts, size * int(rng.integers(1, 10))))
        phases = [(int(s), tuple(rng.integers(0, 4, 3).tolist())) for s in [0, *starts]]
        phases = [(s, w if any(w) else (1, 0, 0)) for s, w in phases]  # all zero: refused
        weights = schedule(phases)
        summed = np.zeros(3, dtype=np.int64)
        for epoch in range(14):
            assert drawn_before(weights, epoch, size) == list(summed), (phases, size, epoch)
            summed += epoch_quota(weights, epoch, size)


def test_a_phase_after_10_000_epochs_is_summed_without_a_pass_over_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    size = 1_000_003
    first, second = (0.7, 0.2, 0.1), (0.1, 0.1, 0.8)
    phases: Phases = [(0, first), (10_000 * size + size // 3, second)]
    mix = phased((50, 20, 5), phases, 300, epoch_size=size)
    calls = []
    split = mixture_spans.epoch_quota
    monkeypatch.setattr(mixture_spans, "epoch_quota",
                        lambda *args: calls.append(args[1]) or split(*args))
    mark = drawn_before(mix.schedule, 10_002, size)
    assert calls == [10_000], "only the epoch the phase begins within is split"
    whole_first = apportion(size, MixtureWeights(first).shares)
    whole_second = apportion(size, MixtureWeights(second).shares)
    crossed = split(mix.schedule, 10_000, size)
    assert mark == [10_000 * a + c + b for a, b, c in zip(whole_first, whole_second, crossed,
                                                          strict=True)]
    documents = whole_epoch(mix, 10_002)
    assert list(documents.documents_before) == [mix.entries_at(s, m) for s, m in enumerate(mark)]
    assert all(abs(documents.tokens_before[s] - mark[s]) <= spread(mix, s, len(mix.lengths[s]))
               for s in range(3))


def test_a_phase_that_begins_with_an_epoch_gives_that_epoch_its_weights_whole() -> None:
    mix = phased((500, 120, 9), [(0, (5, 3, 2)), (600, (1, 1, 1))], 50,
                 weight_by="documents", epoch_size=300)
    for epoch, counts in [(1, [150, 90, 60]), (2, [100, 100, 100]), (3, [100, 100, 100])]:
        documents = whole_epoch(mix, epoch)
        assert list(np.bincount(documents.source, minlength=3)) == counts
    documents = whole_epoch(mix, 2)
    assert list(documents.documents_before) == [300, 180, 120]
    assert list(np.bincount(documents.source[:60], minlength=3)) == [20, 20, 20]


def test_a_source_weighted_zero_in_a_phase_gets_nothing_there() -> None:
    phases: Phases = [(0, (1, 1)), (150, (1, 0)), (450, (1, 1)), (600, (1, 0))]
    mix = phased((100, 40), phases, 50, weight_by="documents", epoch_size=300)
    first, second, third = (whole_epoch(mix, e) for e in range(3))
    assert list(np.bincount(first.source[:150], minlength=2)) == [75, 75]
    assert not first.source[150:].any(), "positions 150 .. 299 are all source 0"
    assert not second.source[:150].any()
    assert list(np.bincount(second.source[150:], minlength=2)) == [75, 75]
    assert not third.source.any(), "a whole epoch at weight 0"
    assert whole_epoch(mix, 3).documents_before[1] == third.documents_before[1] == 150
    by_tokens = phased((100, 40), [(0, (1, 1)), (30_000, (1, 0))], 200, epoch_size=60_000)
    documents = whole_epoch(by_tokens, 0)
    last = np.flatnonzero(documents.source == 1)[-1]
    first_span = by_tokens.epoch(0).spans[0].size
    assert last < first_span, "source 1 only before the switch"
    assert abs(documents.lengths[:first_span].sum() - 30_000) <= spread(by_tokens, 0, 300)


@pytest.mark.parametrize("weight_by", ["tokens", "documents"])
def test_streams_repeat_a_document_only_after_all_were_drawn_across_a_switch(
        weight_by: str) -> None:
    size = 60_000 if weight_by == "tokens" else 400
    phases: Phases = [(0, (5, 3, 2)), (size * 5 // 2, (2, 3, 5)), (size * 4 + 7, (5, 0, 5))]
    mix = phased((500, 120, 9), phases, 300, weight_by=weight_by, epoch_size=size)
    counts = draws_per_document(mix, 7)
    assert counts[2].min() >= 5, "source 2 up-sampled, the more after the switch"


def test_the_epoch_is_a_pure_function_of_its_inputs() -> None:
    phases: Phases = [(0, (1, 1)), (5_000, (1, 3))]
    a = whole_epoch(phased((300, 50), phases, 100, seed=4, epoch_size=8_000), 0)
    b = whole_epoch(phased((300, 50), phases, 100, seed=4, epoch_size=8_000), 0)
    c = whole_epoch(phased((300, 50), [(0, (1, 1)), (6_000, (1, 3))], 100, seed=4,
                           epoch_size=8_000), 0)
    assert np.array_equal(a.local, b.local) and np.array_equal(a.source, b.source)
    assert not np.array_equal(a.source, c.source), "the switch moves with its start"


def test_the_identity_names_the_phases_and_bad_schedules_are_refused() -> None:
    phases: Phases = [(0, (2, 1)), (40, (1, 2))]
    assert phased((5, 3), phases, 10).identity()["weights"] == [[0, [2, 1]], [40, [1, 2]]]
    with pytest.raises(ArgumentError, match="schedule must be a MixtureWeights or a "
                                            "WeightSchedule, got list"):
        TokenMixture((np.array([3, 4]), np.array([5])), [1, 1])  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="weights has 2 weights for 3 sources"):
        phased((5, 3, 2), phases)
