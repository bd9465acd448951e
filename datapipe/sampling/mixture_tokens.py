"""A token-weighted mixture's epoch: which documents of which sources, in which order, before
the token planners (sampling/tokens.py) cut them into batches.

Weights are by tokens (how LLM blends are given) or by documents. With tokens, an epoch has
`epoch_size` tokens and source s contributes its share Q_s(e) of them: epoch e takes the
documents of its stream (mixture_streams.stream_slice) that begin within tokens
[M_s(e), M_s(e) + Q_s(e)) of it, M_s(e) the sum of its quotas over the epochs before, so what
one epoch overshoots by its last document the next one takes less, and a stream's position
after any number of epochs is one search in one permutation's token counts.

Weights may change in phases that begin at positions in the weights' unit (mixture_spans.py):
an epoch is split into spans by the phases in force over it, and each source's documents go to
the spans in stream order, each span taking those that begin within the source's amount of it.
Within a span the sources' documents are interleaved by token deficit: each document is placed
at the midpoint of the tokens it brings, as a fraction of its source's amount of the span, so
that every stretch of the epoch holds each source close to the weights in force. With one
phase, the span is the epoch and the amount the quota. The epoch then goes to the token
planners as one list of documents (`MixtureDocuments.lengths`, in that order), with a map back
to (source, index within the source): their resume (Pieces, TokenRemainder) is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.sampling.elastic import Segment, drawn_prefix
from datapipe.sampling.mixture_spans import drawn_before, epoch_quota, epoch_spans
from datapipe.sampling.mixture_streams import stream_slice
from datapipe.sampling.mixture_weights import MixtureWeights, WeightSchedule
from datapipe.sampling.tokens import TokenPlan, TokenRemainder

WEIGHT_UNITS = ("tokens", "documents")


@dataclass(frozen=True)
class MixtureDocuments:
    """An epoch's documents in the order the planners take them."""

    lengths: np.ndarray  # per document of the epoch: its tokens
    source: np.ndarray   # per document: its source
    local: np.ndarray    # per document: its index within its source
    documents_before: np.ndarray  # per source: documents the epochs before drew
    tokens_before: np.ndarray     # per source: tokens the epochs before drew

    @property
    def order(self) -> np.ndarray:
        """The planners' `order` over `lengths`: the interleaving is the epoch's order."""
        return np.arange(len(self.lengths), dtype=np.int64)


@dataclass(frozen=True)
class TokenMixture:
    """Sources of documents with `lengths[s][i]` tokens each, mixed by `schedule`: phases of
    weights whose `start_step`s are positions in the weights' unit, counted from the start of
    epoch 0 (mixture_spans.py); a plain MixtureWeights is one phase."""

    lengths: tuple[np.ndarray, ...]
    schedule: WeightSchedule  # or MixtureWeights, taken as one phase
    weight_by: str = "tokens"
    epoch_size: int | None = None  # tokens or documents (as weight_by); None: the sum
    seed: int = 0
    shuffle: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.schedule, MixtureWeights):
            object.__setattr__(self, "schedule", WeightSchedule.constant(self.schedule))
        if not isinstance(self.schedule, WeightSchedule):
            raise ArgumentError("schedule must be a MixtureWeights or a WeightSchedule, got "
                                f"{type(self.schedule).__name__}")
        if self.weight_by not in WEIGHT_UNITS:
            raise ArgumentError(f"weight_by must be one of {', '.join(WEIGHT_UNITS)}, got "
                                f"{self.weight_by!r}")
        weights = len(self.schedule.phases[0].weights.values)
        if weights != len(self.lengths):
            raise ArgumentError(f"weights has {weights} weights for {len(self.lengths)} "
                                "sources")
        for s, lengths in enumerate(self.lengths):
            if not len(lengths) or not lengths.sum():
                raise ArgumentError(f"source {s} is empty: it has no "
                                    f"{'documents' if not len(lengths) else 'tokens'}")
        if self.epoch_size is not None and self.epoch_size < 1:
            raise ArgumentError(f"epoch_size must be >= 1 {self.weight_by}, got "
                                f"{self.epoch_size}")

    def identity(self) -> dict[str, object]:
        """What a state saved over this mixture must match (see Mixture.identity)."""
        return {"weights": self.schedule.to_json(), "weight_by": self.weight_by,
                "epoch_size": self.size}

    @property
    def by_tokens(self) -> bool:
        return self.weight_by == "tokens"

    @property
    def size(self) -> int:
        """An epoch's size in the weights' unit."""
        if self.epoch_size is not None:
            return self.epoch_size
        return sum(int(n.sum()) if self.by_tokens else len(n) for n in self.lengths)

    @property
    def quota(self) -> list[int]:
        """Each source's share of epoch 0 in the weights' unit (of every epoch, with one
        phase)."""
        return self.epoch_quota(0)

    def epoch_quota(self, epoch: int) -> list[int]:
        """Each source's share of epoch `epoch`, by the phases in force over it."""
        return epoch_quota(self.schedule, epoch, self.size)

    def stream_position(self, source: int, epoch: int,
                        cache: dict | None = None) -> tuple[int, int]:
        """(documents, tokens) of source's stream that the epochs before `epoch` drew."""
        return self._position_at(source, drawn_before(self.schedule, epoch, self.size)[source],
                                 cache)

    def _position_at(self, source: int, mark: int, cache: dict | None,
                     begins_of: dict[tuple[int, int], np.ndarray] | None = None) -> tuple[int, int]:
        """(documents, tokens) of source's stream before its first document that begins at or
        after `mark` (in the weights' unit). (`begins_of`: each permutation's token counts
        before its documents, kept for the caller's next positions in it.)"""
        if not self.by_tokens:
            return mark, _tokens_up_to(self, source, mark, cache)
        lengths = self.lengths[source]
        total, n = int(lengths.sum(dtype=np.int64)), len(lengths)
        cycle, into = divmod(mark, total)
        begins = None if begins_of is None else begins_of.get((source, cycle))
        if begins is None:
            ordered = lengths[stream_slice(n, self.seed, source, cycle * n, n, self.shuffle,
                                           cache)].astype(np.int64)
            begins = np.cumsum(ordered) - ordered
            if begins_of is not None:
                begins_of[source, cycle] = begins
        first = int(np.searchsorted(begins, into, side="left"))
        tokens = cycle * total + (int(begins[first]) if first < n else total)
        return cycle * n + first, tokens

    def epoch(self, epoch: int) -> MixtureDocuments:
        """The documents of epoch `epoch`, interleaved by token (or document) deficit within
        each span of the phases."""
        keys, spans, sources, locals_, lengths = [], [], [], [], []
        cache: dict = {}  # each permutation made once, for both ends and the slice
        begins_of: dict[tuple[int, int], np.ndarray] = {}  # and its token counts
        amounts = np.array([span.amounts for span in epoch_spans(self.schedule, epoch,
                                                                 self.size)], dtype=np.int64)
        marks = drawn_before(self.schedule, epoch, self.size)
        before = [self._position_at(s, m, cache, begins_of) for s, m in enumerate(marks)]
        after = [self._position_at(s, m + int(a), cache, begins_of)
                 for s, (m, a) in enumerate(zip(marks, amounts.sum(axis=0), strict=True))]
        for s, ((lo, lo_tokens), (hi, _)) in enumerate(zip(before, after, strict=True)):
            local = stream_slice(len(self.lengths[s]), self.seed, s, lo, hi - lo, self.shuffle,
                                 cache)
            size = self.lengths[s][local].astype(np.int64)
            amount = size if self.by_tokens else np.ones(len(size), dtype=np.int64)
            overshot = (lo_tokens if self.by_tokens else lo) - marks[s]
            span, key = _span_keys(amount, overshot, amounts[:, s])
            keys.append(key)
            spans.append(span)
            sources.append(np.full(len(local), s, dtype=np.int64))
            locals_.append(local)
            lengths.append(size)
        # Span by span, each by its keys; ties: the earlier source. Each source's keys come
        # sorted: with one span, a stable sort merges the runs (what lexsort gives, faster).
        if len(amounts) == 1:
            order = np.argsort(np.concatenate(keys), kind="stable")
        else:
            order = np.lexsort((np.concatenate(keys), np.concatenate(spans)))
        return MixtureDocuments(np.concatenate(lengths)[order], np.concatenate(sources)[order],
                                np.concatenate(locals_)[order],
                                np.array([d for d, _ in before], dtype=np.int64),
                                np.array([t for _, t in before], dtype=np.int64))


def _span_keys(amount: np.ndarray, overshot: int,
               span_amounts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(span, key) of a source's documents in an epoch, in stream order. A document goes to
    the span its beginning falls in (counted from the source's mark: the first one begins
    `overshot` past it); its key is the midpoint of what it brings, from the span's first
    document, as a fraction of the source's amount of the span. A span the source has no
    amount of gets none of its documents."""
    ends = np.cumsum(amount)
    if len(span_amounts) == 1:  # the epoch is the span: every document is in it
        return np.zeros(len(amount), dtype=np.int64), \
            (ends - amount / 2) / max(int(span_amounts[0]), 1)
    begins = ends - amount
    span = np.searchsorted(np.cumsum(span_amounts), begins + overshot, side="right")
    first = np.searchsorted(span, span, side="left")  # each one's span's first document
    midpoint = ends - amount / 2 - begins[first]
    return span, midpoint / np.maximum(span_amounts[span], 1)


def _tokens_up_to(mixture: TokenMixture, source: int, documents: int,
                  cache: dict | None) -> int:
    """Tokens in the first `documents` entries of a source's stream."""
    lengths = mixture.lengths[source].astype(np.int64)
    cycle, into = divmod(documents, len(lengths))
    head = stream_slice(len(lengths), mixture.seed, source, cycle * len(lengths), into,
                        mixture.shuffle, cache)
    return cycle * int(lengths.sum()) + int(lengths[head].sum())


def drawn_table(plan: TokenPlan, source: np.ndarray,
                sources: int) -> tuple[np.ndarray, np.ndarray]:
    """(documents, tokens) of each source in the first k batches of a global plan, row k
    (`source`: per document of the epoch). A document counts once, with its first piece.
    Made once with a plan, it makes a loader's progress a lookup."""
    batch_of_row = np.repeat(np.arange(len(plan)), np.diff(plan.batch_offsets))
    batch = np.repeat(batch_of_row, np.diff(plan.row_offsets))  # per segment
    at = batch * sources + source[plan.doc]
    cells = len(plan) * sources
    tokens = np.bincount(at, weights=plan.end - plan.start, minlength=cells)
    documents = np.bincount(at[plan.start == 0], minlength=cells)
    out = []
    for per_batch in (documents, tokens):
        table = np.zeros((len(plan) + 1, sources), dtype=np.int64)
        np.cumsum(per_batch.reshape(len(plan), sources).astype(np.int64), axis=0,
                  out=table[1:])
        out.append(table)
    return out[0], out[1]


def drawn_in_plan(plan: TokenPlan, batches: int, source: np.ndarray,
                  sources: int) -> tuple[np.ndarray, np.ndarray]:
    """(documents, tokens) of each source in the first `batches` batches of a global plan."""
    documents, tokens = drawn_table(plan, source, sources)
    return documents[batches], tokens[batches]


def drawn_in_token_epoch(start: TokenRemainder, lineage: Sequence[Segment], world_size: int,
                         batches_done: int, epoch: MixtureDocuments,
                         sources: int) -> tuple[np.ndarray, np.ndarray]:
    """(documents, tokens) of each source drawn in an epoch so far, by all ranks: in the
    segments of `lineage`, then in the first `batches_done` batches at `world_size`."""
    documents = np.zeros(sources, dtype=np.int64)
    tokens = np.zeros(sources, dtype=np.int64)
    rest = start
    for world, done in [*((s.world_size, s.batches_done) for s in lineage),
                        (world_size, batches_done)]:
        drawn = drawn_prefix(len(rest.plan), world, done)
        d, t = drawn_in_plan(rest.plan, drawn, epoch.source, sources)
        documents, tokens = documents + d, tokens + t
        rest = rest.after(world, done)
    return documents, tokens
