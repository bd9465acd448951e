"""A token-weighted mixture's epochs, read back from the token planners' batches: the share by
tokens over any 100 consecutive batches, document counts from quotas by tokens or documents
(exact at every full pass over a source), streams that repeat nothing early, windows that need
nothing before them, and counts per source from the windowed plan."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from datapipe.errors import ArgumentError
from datapipe.loader.token_mixing import CombinedSources
from datapipe.sampling.interleave import interleave, prefix
from datapipe.sampling.mixture_tokens import TokenMixture
from datapipe.sampling.mixture_weights import MixtureWeights
from datapipe.sampling.token_windows import TokenWindows
from datapipe.sampling.tokens import TokenPlan, plan_packed
from tests.sampling.token_reference import whole_pieces


def token_mixture(sizes: tuple[int, ...], weights: tuple[float, ...], longest: int = 4000,
                  seed: int = 0, **kw: object) -> TokenMixture:
    rng = np.random.default_rng(seed)
    lengths = tuple(rng.integers(1, longest, n).astype(np.uint32) for n in sizes)
    return TokenMixture(lengths, MixtureWeights(weights), seed=seed, **kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class WholeEpoch:
    """An epoch's documents as one window, as the planners see them, and the streams' state."""

    source: np.ndarray
    local: np.ndarray
    lengths: np.ndarray
    documents_before: np.ndarray
    tokens_before: np.ndarray

    @property
    def order(self) -> np.ndarray:
        return np.arange(len(self.lengths), dtype=np.int64)


def whole_epoch(mix: TokenMixture, epoch: int) -> WholeEpoch:
    source, local = mix.window(epoch, 0, mix.epoch(epoch).size)
    lengths = np.array([mix.lengths[s][i] for s, i in zip(source, local, strict=True)],
                       dtype=np.int64)
    return WholeEpoch(source, local, lengths, np.array(mix.epoch(epoch).entries_before),
                      mix.tokens_before(epoch))


def packed(epoch: WholeEpoch, max_tokens: int) -> TokenPlan:
    return plan_packed(whole_pieces(epoch.order, epoch.lengths), max_tokens, 1, None)


def tokens_per_batch(plan: TokenPlan, source: np.ndarray, sources: int) -> np.ndarray:
    out = np.zeros((len(plan), sources))
    for b in range(len(plan)):
        doc, start, end, _ = plan.batch(b)
        out[b] = np.bincount(source[doc], weights=end - start, minlength=sources)
    return out


def spread(mix: TokenMixture, source: int, documents: int) -> float:
    """Four standard deviations of the tokens of `documents` random documents of a source."""
    lengths = np.asarray(mix.lengths[source], dtype=np.float64)
    return 4 * float(lengths.std()) * documents ** 0.5 + float(lengths.max())


@pytest.mark.parametrize("weights", [(0.6, 0.3, 0.1), (1, 1, 1), (0.9, 0.08, 0.02)])
@pytest.mark.parametrize("longest", [300, 4000, 8192])
def test_any_100_consecutive_batches_hold_each_source_within_2_percent_by_tokens(
        weights: tuple[float, ...], longest: int) -> None:
    """The deficit order goes document by document: a window can be off by about a document
    per source at each end, so the bound is for documents up to half a batch's budget (up to
    a whole batch, as long as its budget, it was seen to reach 2.1%)."""
    mix = token_mixture((3000, 800, 50), weights, longest, seed=longest,
                        epoch_size=16_384 * 350)
    shares = np.array([float(s) for s in mix.schedule.phases[0].weights.shares])
    for epoch in (0, 3):
        documents = whole_epoch(mix, epoch)
        tokens = tokens_per_batch(packed(documents, 16_384), documents.source, 3)
        assert len(tokens) >= 300
        running = np.vstack([np.zeros(3), np.cumsum(tokens, axis=0)])
        window = running[100:] - running[:-100]
        share = window / window.sum(axis=1, keepdims=True)
        # Against the epoch's own shares (the even spread), and those against the weights
        # (the documents' sampling spread, 4 standard deviations).
        overall = running[-1] / running[-1].sum()
        assert np.abs(share - overall).max() <= 0.02, (weights, longest, epoch)
        counts = np.bincount(documents.source, minlength=3)
        bound = [spread(mix, s, int(counts[s])) / running[-1].sum() for s in range(3)]
        assert np.all(np.abs(overall - shares) <= bound), (overall, shares, bound)


def test_documents_of_all_sources_meet_in_the_same_batches() -> None:
    mix = token_mixture((2000, 2000, 2000), (0.6, 0.3, 0.1), 1000)
    documents = whole_epoch(mix, 1)
    tokens = tokens_per_batch(packed(documents, 16_384), documents.source, 3)
    assert (tokens[:-1] > 0).all(), "every whole batch holds every source"


def test_token_quotas_become_document_counts_exact_at_every_full_pass() -> None:
    mix = token_mixture((500, 120, 9), (5, 3, 2), 2000, epoch_size=400_000)
    running = np.zeros(3, dtype=np.int64)
    entries = np.zeros(3, dtype=np.int64)
    for epoch in range(8):
        documents = whole_epoch(mix, epoch)
        assert list(documents.tokens_before) == list(running)
        assert list(documents.documents_before) == list(entries)
        counts = np.bincount(documents.source, minlength=3)
        running += np.bincount(documents.source, weights=documents.lengths,
                               minlength=3).astype(np.int64)
        entries += counts
        target = (epoch + 1) * np.array(mix.quota)
        # The documents whose expected tokens are the quota: no drift, the spread of a sample.
        expected = [target[s] * len(mix.lengths[s]) // mix.tokens[s] for s in range(3)]
        assert list(entries) == expected
        for s in range(3):
            passes, into = divmod(int(entries[s]), len(mix.lengths[s]))
            assert abs(running[s] - target[s]) <= spread(mix, s, min(into, 500)), (epoch, s)
            if into == 0:
                assert running[s] == passes * mix.tokens[s], "a whole pass is exact"


def test_weights_by_documents_give_each_source_its_share_of_documents() -> None:
    mix = token_mixture((500, 120, 9), (5, 3, 2), weight_by="documents", epoch_size=300)
    assert mix.quota == [150, 90, 60]
    for epoch in range(4):
        documents = whole_epoch(mix, epoch)
        assert list(np.bincount(documents.source, minlength=3)) == [150, 90, 60]
        assert list(documents.documents_before) == [150 * epoch, 90 * epoch, 60 * epoch]
        first_60 = np.bincount(documents.source[:60], minlength=3)
        assert list(first_60) == [30, 18, 12], "interleaved by document deficit"


def draws_per_document(mix: TokenMixture, epochs: int) -> list[np.ndarray]:
    """How often each document of each source was drawn in epochs 0 .. epochs - 1, checked
    after every epoch to differ by at most one within a source: no document comes again
    before all of its source's came."""
    counts = [np.zeros(len(n), dtype=np.int64) for n in mix.lengths]
    for epoch in range(epochs):
        documents = whole_epoch(mix, epoch)
        for s, local in zip(documents.source, documents.local, strict=True):
            counts[s][local] += 1
        assert all(c.max() - c.min() <= 1 for c in counts), epoch
    return counts


@pytest.mark.parametrize("weight_by", ["tokens", "documents"])
def test_streams_repeat_a_document_only_after_all_were_drawn(weight_by: str) -> None:
    # Source 2 (9 documents) is up-sampled, source 0 (500) down-sampled.
    mix = token_mixture((500, 120, 9), (5, 3, 2), 300, weight_by=weight_by, epoch_size=
                        60_000 if weight_by == "tokens" else 400)
    counts = draws_per_document(mix, 6)
    assert counts[0].min() >= 1, "a down-sampled source is all seen over epochs"
    assert counts[2].min() >= 2, "an up-sampled one many times"


def test_the_epoch_is_a_pure_function_of_its_inputs() -> None:
    a = whole_epoch(token_mixture((300, 50), (1, 1), seed=4), 2)
    b = whole_epoch(token_mixture((300, 50), (1, 1), seed=4), 2)
    c = whole_epoch(token_mixture((300, 50), (1, 1), seed=4), 3)
    assert np.array_equal(a.local, b.local) and np.array_equal(a.source, b.source)
    assert not np.array_equal(a.local[:50], c.local[:50])


@pytest.mark.parametrize("weight_by", ["tokens", "documents"])
def test_windows_hold_the_epochs_documents_and_need_nothing_before_them(weight_by: str) -> None:
    mix = token_mixture((700, 90, 4), (5, 3, 2), 300, seed=2, weight_by=weight_by,
                        epoch_size=90_000 if weight_by == "tokens" else 1000)
    for epoch in (0, 3):
        n = mix.epoch(epoch).size
        whole = mix.window(epoch, 0, n)
        for width in (1, 37, 256):
            parts = [mix.window(epoch, lo, min(lo + width, n)) for lo in range(0, n, width)]
            source = np.concatenate([p[0] for p in parts])
            local = np.concatenate([p[1] for p in parts])
            assert sorted(zip(source, local, strict=True)) == sorted(zip(*whole, strict=True))
            if weight_by == "documents":  # the even merge itself: the same order
                assert np.array_equal(source, whole[0]) and np.array_equal(local, whole[1])


def test_interleave_spreads_every_source_evenly_and_computes_any_place_alone() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        counts = rng.integers(0, 40, int(rng.integers(1, 7))).tolist()
        n = sum(counts)
        if not n:
            continue
        source, rank = interleave(counts, np.arange(n))
        for s, c in enumerate(counts):
            places = np.flatnonzero(source == s)
            assert list(rank[places]) == list(range(c)), "each source's ranks in order"
            for p in range(0, n + 1, max(1, n // 7)):  # any prefix: within 2 of its share
                assert abs(np.count_nonzero(source[:p] == s) - p * c / n) < 2
        some = rng.integers(0, n, 10)
        alone = interleave(counts, some)
        assert np.array_equal(alone[0], source[some]) and np.array_equal(alone[1], rank[some])
        for p in (0, 1, n // 3, n - 1, n):  # a prefix's counts by formula, no places walked
            assert prefix(counts, p) == np.bincount(source[:p], minlength=len(counts)).tolist()


def test_counts_per_source_follow_the_windowed_plan() -> None:
    mix = token_mixture((60, 20, 5), (0.6, 0.3, 0.1), 200, epoch_size=30_000)
    sizes = np.array([len(n) for n in mix.lengths])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    lengths = np.concatenate(mix.lengths).astype(np.int64)
    width = 40

    def window(w: int) -> TokenPlan:
        n = mix.epoch(1).size
        source, local = mix.window(1, w * width, min((w + 1) * width, n))
        ids = offsets[source] + local
        return plan_packed(whole_pieces(ids, lengths), 512, 1, None)

    n = mix.epoch(1).size
    windows = TokenWindows(-(-n // width), window, CombinedSources(offsets))
    documents, tokens = np.zeros(3, np.int64), np.zeros(3, np.int64)
    for g in range(windows.total() + 1):
        assert [list(x) for x in windows.drawn_by_source(g)] == [list(documents),
                                                                 list(tokens)], g
        at = windows.locate(g)
        if at is None:
            break
        doc, start, end, _ = at.plan.batch(at.local)
        source = np.searchsorted(offsets, doc, side="right") - 1
        tokens += np.bincount(source, weights=end - start, minlength=3).astype(np.int64)
        documents += np.bincount(source[start == 0], minlength=3)
    assert documents.sum() == n


def test_the_first_window_of_a_billion_document_mixture_costs_a_window() -> None:
    huge = np.lib.stride_tricks.as_strided(np.array([7], dtype=np.uint32), (10**9,), (0,))
    mix = TokenMixture((huge, np.full(1000, 9, np.uint32)), MixtureWeights((0.9, 0.1)),
                       totals=(7 * 10**9, 9000), epoch_size=10**10)
    source, local = mix.window(5, 123_456_789, 123_456_789 + 4096)
    assert len(source) == 4096 and set(source.tolist()) == {0, 1}
    assert local[source == 0].max() < 10**9


@pytest.mark.parametrize("kw, message", [
    ({"weight_by": "samples"}, "weight_by must be one of tokens, documents, got 'samples'"),
    ({"epoch_size": 0}, "epoch_size must be >= 1 tokens, got 0"),
    ({"lengths": (np.array([3, 4]), np.array([], dtype=np.int64))},
     "source 1 is empty: it has no documents"),
    ({"lengths": (np.array([3, 4]), np.array([0, 0]))}, "source 1 is empty: it has no tokens"),
    ({"lengths": (np.array([3, 4]),) * 3}, "weights has 2 weights for 3 sources"),
])
def test_bad_settings_are_refused_in_one_line(kw: dict, message: str) -> None:
    args = {"lengths": (np.array([3, 4]), np.array([5])), "schedule": MixtureWeights((1, 1)),
            **kw}
    with pytest.raises(ArgumentError, match=message):
        TokenMixture(**args)


def test_the_identity_names_what_a_saved_state_must_match() -> None:
    mix = token_mixture((5, 3), (2, 1), 10, seed=1)
    assert mix.identity() == {"weights": [[0, [2, 1]]], "weight_by": "tokens",
                              "epoch_size": int(sum(n.sum() for n in mix.lengths))}
    assert token_mixture((5, 3), (2, 1), 10, seed=1, weight_by="documents").identity() == {
        "weights": [[0, [2, 1]]], "weight_by": "documents", "epoch_size": 8}
