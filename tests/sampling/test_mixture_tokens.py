"""A token-weighted mixture's epochs, read back from the token planners' batches: the share by
tokens over any 100 consecutive batches, quotas by tokens or documents without drift, streams
that repeat nothing early, accounting, and resume at other world sizes with the planners' own
remainders."""

from __future__ import annotations

import functools
import itertools
from collections import Counter

import numpy as np
import pytest

from datapipe.errors import ArgumentError
from datapipe.sampling.elastic import Segment
from datapipe.sampling.mixture_tokens import (
    MixtureDocuments,
    TokenMixture,
    drawn_in_plan,
    drawn_in_token_epoch,
)
from datapipe.sampling.mixture_weights import MixtureWeights
from datapipe.sampling.tokens import Pieces, TokenPlan, TokenRemainder, plan_packed


def token_mixture(sizes: tuple[int, ...], weights: tuple[float, ...], longest: int = 4000,
                  seed: int = 0, **kw: object) -> TokenMixture:
    rng = np.random.default_rng(seed)
    lengths = tuple(rng.integers(1, longest, n).astype(np.uint32) for n in sizes)
    return TokenMixture(lengths, MixtureWeights(weights), seed=seed, **kw)  # type: ignore[arg-type]


def packed(epoch: MixtureDocuments, max_tokens: int) -> TokenPlan:
    return plan_packed(Pieces.whole(epoch.order, epoch.lengths), max_tokens, 1, None)


def tokens_per_batch(plan: TokenPlan, source: np.ndarray, sources: int) -> np.ndarray:
    out = np.zeros((len(plan), sources))
    for b in range(len(plan)):
        doc, start, end, _ = plan.batch(b)
        out[b] = np.bincount(source[doc], weights=end - start, minlength=sources)
    return out


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
        documents = mix.epoch(epoch)
        tokens = tokens_per_batch(packed(documents, 16_384), documents.source, 3)
        assert len(tokens) >= 300
        running = np.vstack([np.zeros(3), np.cumsum(tokens, axis=0)])
        window = running[100:] - running[:-100]
        share = window / window.sum(axis=1, keepdims=True)
        assert np.abs(share - shares).max() <= 0.02, (weights, longest, epoch)


def test_documents_of_all_sources_meet_in_the_same_batches() -> None:
    mix = token_mixture((2000, 2000, 2000), (0.6, 0.3, 0.1), 1000)
    documents = mix.epoch(1)
    tokens = tokens_per_batch(packed(documents, 16_384), documents.source, 3)
    assert (tokens[:-1] > 0).all(), "every whole batch holds every source"


def test_token_quotas_hold_over_epochs_without_drift() -> None:
    mix = token_mixture((500, 120, 9), (5, 3, 2), 2000, epoch_size=400_000)
    longest = max(int(n.max()) for n in mix.lengths)
    running = np.zeros(3, dtype=np.int64)
    for epoch in range(8):
        documents = mix.epoch(epoch)
        assert list(documents.tokens_before) == list(running)
        tokens = np.bincount(documents.source, weights=documents.lengths, minlength=3)
        running += tokens.astype(np.int64)
        # An epoch draws until its quota is met: what one overshoots the next takes less.
        assert np.all(np.abs(running - (epoch + 1) * np.array(mix.quota)) < longest)
        assert np.all(np.abs(tokens - np.array(mix.quota)) < 2 * longest)


def test_weights_by_documents_give_each_source_its_share_of_documents() -> None:
    mix = token_mixture((500, 120, 9), (5, 3, 2), weight_by="documents", epoch_size=300)
    assert mix.quota == [150, 90, 60]
    for epoch in range(4):
        documents = mix.epoch(epoch)
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
        documents = mix.epoch(epoch)
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
    a = token_mixture((300, 50), (1, 1), seed=4).epoch(2)
    b = token_mixture((300, 50), (1, 1), seed=4).epoch(2)
    c = token_mixture((300, 50), (1, 1), seed=4).epoch(3)
    assert np.array_equal(a.local, b.local) and np.array_equal(a.source, b.source)
    assert not np.array_equal(a.local[:50], c.local[:50])


def drawn_tokens(rest: TokenRemainder, world: int, batches: int | None,
                 documents: MixtureDocuments) -> Counter:
    """((document of the epoch, token) -> times) over every real batch all ranks draw."""
    seen: Counter = Counter()
    for rank in range(world):
        plan, is_pad = rest.rank_plan(rank, world)
        for b in range(len(plan) if batches is None else batches):
            if is_pad[b]:
                continue
            doc, start, end, _ = plan.batch(b)
            for d, lo, hi in zip(doc.tolist(), start.tolist(), end.tolist(), strict=True):
                seen.update((d, t) for t in range(lo, hi))
    return seen


@pytest.mark.parametrize("worlds", [(2, 3), (3, 2), (1, 2, 4)])
def test_the_planners_resume_a_mixture_at_other_world_sizes(worlds: tuple[int, ...]) -> None:
    mix = token_mixture((40, 12, 3), (0.6, 0.3, 0.1), 50, epoch_size=3000)
    documents = mix.epoch(1)
    replan = functools.partial(plan_packed, max_tokens=64, pad_multiple=1, batch_size=None)
    start = TokenRemainder.start(documents.order, documents.lengths,
                                 lambda pieces: replan(pieces))
    whole = drawn_tokens(start, 1, None, documents)
    assert set(whole.values()) == {1}
    for done in itertools.product(*(range(0, start.batches_per_rank(w) + 1, 3)
                                    for w in worlds[:-1])):
        seen, rest, lineage = Counter(), start, []
        for world, k in zip(worlds, done, strict=False):
            if k > rest.batches_per_rank(world):
                break
            seen += drawn_tokens(rest, world, k, documents)
            rest = rest.after(world, k)
            lineage.append(Segment(world, k))
        else:
            seen += drawn_tokens(rest, worlds[-1], None, documents)
            assert seen == whole, (worlds, done, "every token of the epoch once")
            docs, tokens = drawn_in_token_epoch(start, lineage, worlds[-1],
                                                rest.batches_per_rank(worlds[-1]),
                                                documents, 3)
            assert list(tokens) == list(np.bincount(documents.source,
                                                    weights=documents.lengths, minlength=3))
            assert list(docs) == list(np.bincount(documents.source, minlength=3))


def test_tokens_and_documents_drawn_are_counted_from_the_plan() -> None:
    mix = token_mixture((60, 20, 5), (0.6, 0.3, 0.1), 200, epoch_size=8000)
    documents = mix.epoch(0)
    plan = packed(documents, 512)
    for batches in range(len(plan) + 1):
        seen = drawn_tokens(TokenRemainder.start(documents.order, documents.lengths,
                                                 lambda p: packed_pieces(p, 512)),
                            1, batches, documents)
        tokens = Counter(int(documents.source[d]) for d, _ in seen.elements())
        firsts = Counter(int(documents.source[d]) for d, t in seen if t == 0)
        docs, counted = drawn_in_plan(plan, batches, documents.source, 3)
        assert list(counted) == [tokens[s] for s in range(3)]
        assert list(docs) == [firsts[s] for s in range(3)]


def packed_pieces(pieces: Pieces, max_tokens: int) -> TokenPlan:
    return plan_packed(pieces, max_tokens, 1, None)


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
