"""A token-weighted mixture's epoch, a window of documents at a time: which documents of which
sources, in which order, before the token planners (sampling/tokens.py) cut them into batches.

Weights are by tokens (how LLM blends are given) or by documents, as positions in the weights'
unit over the run: epoch e covers [e * E, (e + 1) * E) of it (E = `epoch_size`), and the phases
in force split it into spans (mixture_spans.py) with per-source amounts. What an epoch takes
from source s is a run of *documents* of its stream (mixture_streams.stream_slice): the stream
entry where amount M of the source begins is `entries_at(s, M)` — M itself by documents, and
by tokens M x n_s / T_s (n_s documents holding T_s tokens), the documents whose expected tokens
are M. So where every stream stands at any epoch is arithmetic, a window of the epoch never
needs the documents before it, and no array the size of a source is made. By tokens the shares
hold in expectation per epoch and exactly at each full pass over a source (the stream then
stands at a whole number of passes); an epoch's tokens per source differ from its quota by the
spread of a random sample's lengths (about sqrt(D) x the length's standard deviation for D
documents).

Within a span the sources' documents are merged evenly by count (`interleave`: each source's
k-th document near k / D_s of the way), and each window's documents are then ordered by token
deficit — each at the middle of the tokens it brings, as a fraction of its source's tokens in
that stretch — so that any stretch of the epoch holds each source close to its share of tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.sampling.interleave import interleave
from datapipe.sampling.mixture_spans import drawn_before, epoch_quota, epoch_spans
from datapipe.sampling.mixture_streams import stream_slice
from datapipe.sampling.mixture_weights import MixtureWeights, WeightSchedule

WEIGHT_UNITS = ("tokens", "documents")
# An epoch's places times a source's documents must stay within int64 (interleave multiplies
# them): 3 x 10^9 documents an epoch.
MAX_EPOCH_DOCUMENTS = 3_000_000_000
_SUM_CHUNK = 1 << 20  # stream entries summed at once (tokens_before)


@dataclass(frozen=True)
class SpanDocuments:
    """Places `first` .. `first + sum(counts) - 1` of an epoch: per source, `counts[s]`
    documents from its stream entry `starts[s]` on."""

    first: int
    starts: tuple[int, ...]
    counts: tuple[int, ...]

    @property
    def size(self) -> int:
        return sum(self.counts)


@dataclass(frozen=True)
class EpochDocuments:
    """An epoch's documents by span, and where each stream stands at its start."""

    spans: tuple[SpanDocuments, ...]
    entries_before: tuple[int, ...]

    @property
    def size(self) -> int:
        return sum(span.size for span in self.spans)


@dataclass(frozen=True)
class TokenMixture:
    """Sources of documents with `lengths[s][i]` tokens each (memory maps do), mixed by
    `schedule`: phases of weights whose `start_step`s are positions in the weights' unit,
    counted from the start of epoch 0 (mixture_spans.py); a plain MixtureWeights is one
    phase. `totals`: each source's tokens, when known (else summed once)."""

    lengths: tuple[np.ndarray, ...]
    schedule: WeightSchedule  # or MixtureWeights, taken as one phase
    weight_by: str = "tokens"
    epoch_size: int | None = None  # tokens or documents (as weight_by); None: the sum
    seed: int = 0
    shuffle: bool = True
    totals: tuple[int, ...] | None = None
    _epochs: dict[int, EpochDocuments] = field(default_factory=dict, init=False, compare=False,
                                               repr=False)

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
        if self.totals is None:
            object.__setattr__(self, "totals", tuple(int(n.sum(dtype=np.int64))
                                                     for n in self.lengths))
        for s, (lengths, total) in enumerate(zip(self.lengths, self.tokens, strict=True)):
            if not len(lengths) or not total:
                raise ArgumentError(f"source {s} is empty: it has no "
                                    f"{'documents' if not len(lengths) else 'tokens'}")
        if self.epoch_size is not None and self.epoch_size < 1:
            raise ArgumentError(f"epoch_size must be >= 1 {self.weight_by}, got "
                                f"{self.epoch_size}")

    @property
    def tokens(self) -> tuple[int, ...]:
        assert self.totals is not None
        return self.totals

    def identity(self) -> dict[str, object]:
        """What a state saved over this mixture must match (see Mixture.identity)."""
        return {"weights": self.schedule.to_json(), "weight_by": self.weight_by,
                "epoch_size": self.size}

    @property
    def by_tokens(self) -> bool:
        return self.weight_by == "tokens"

    @cached_property
    def size(self) -> int:
        """An epoch's size in the weights' unit."""
        if self.epoch_size is not None:
            return self.epoch_size
        return sum(self.tokens) if self.by_tokens else sum(map(len, self.lengths))

    @property
    def quota(self) -> list[int]:
        """Each source's share of epoch 0 in the weights' unit (of every epoch, with one
        phase)."""
        return self.epoch_quota(0)

    def epoch_quota(self, epoch: int) -> list[int]:
        """Each source's share of epoch `epoch`, by the phases in force over it."""
        return epoch_quota(self.schedule, epoch, self.size)

    def entries_at(self, source: int, mark: int) -> int:
        """The stream entry where amount `mark` of source's stream (in the weights' unit)
        begins."""
        if not self.by_tokens:
            return mark
        return mark * len(self.lengths[source]) // self.tokens[source]

    def epoch(self, epoch: int) -> EpochDocuments:
        """Epoch `epoch`'s spans in documents (a few numbers; the last epochs asked kept)."""
        found = self._epochs.get(epoch)
        if found is not None:
            return found
        marks = drawn_before(self.schedule, epoch, self.size)
        spans, first = [], 0
        begin = [self.entries_at(s, m) for s, m in enumerate(marks)]
        for span in epoch_spans(self.schedule, epoch, self.size):
            marks = [m + a for m, a in zip(marks, span.amounts, strict=True)]
            end = [self.entries_at(s, m) for s, m in enumerate(marks)]
            counts = tuple(e - b for b, e in zip(begin, end, strict=True))
            spans.append(SpanDocuments(first, tuple(begin), counts))
            first += sum(counts)
            begin = end
        out = EpochDocuments(tuple(spans), spans[0].starts)
        if out.size > MAX_EPOCH_DOCUMENTS:
            raise ArgumentError(f"an epoch of {out.size:,} documents: a token mixture's epoch "
                                f"holds at most {MAX_EPOCH_DOCUMENTS:,} (give a smaller "
                                "epoch_size)")
        if len(self._epochs) >= 4:
            self._epochs.pop(next(iter(self._epochs)))
        self._epochs[epoch] = out
        return out

    def window(self, epoch: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(source, index within it) of the documents at places lo .. hi - 1 of the epoch, in
        the order the planners take them."""
        sources, locals_ = [], []
        for span in self.epoch(epoch).spans:
            a, b = max(lo, span.first), min(hi, span.first + span.size)
            if a < b:
                source, local = self._span_window(span, a - span.first, b - span.first)
                sources.append(source)
                locals_.append(local)
        if not sources:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(sources), np.concatenate(locals_)

    def _span_window(self, span: SpanDocuments, lo: int,
                     hi: int) -> tuple[np.ndarray, np.ndarray]:
        source, rank = interleave(span.counts, np.arange(lo, hi, dtype=np.int64))
        local = np.empty(len(source), dtype=np.int64)
        keys = np.empty(len(source))
        for s in np.unique(source).tolist():
            at = np.flatnonzero(source == s)  # its ranks there are consecutive, ascending
            first = span.starts[s] + int(rank[at[0]])
            local[at] = stream_slice(len(self.lengths[s]), self.seed, s, first, len(at),
                                     self.shuffle)
            amount = (np.asarray(self.lengths[s][local[at]], dtype=np.float64)
                      if self.by_tokens else np.ones(len(at)))
            ends = np.cumsum(amount)
            keys[at] = (ends - amount / 2) / max(float(ends[-1]), 1.0)
        if not self.by_tokens:  # the even merge is the order by document deficit already
            return source, local
        order = np.lexsort((source, keys))  # ties: the earlier source
        return source[order], local[order]

    def tokens_before(self, epoch: int) -> np.ndarray:
        """Tokens of each source's stream entries the epochs before `epoch` drew: whole
        passes by arithmetic, the pass under way summed a chunk at a time (a pass over what
        it drew: asked by progress(), not by planning)."""
        out = np.zeros(len(self.lengths), dtype=np.int64)
        for s, entries in enumerate(self.epoch(epoch).entries_before):
            n = len(self.lengths[s])
            passes, into = divmod(entries, n)
            out[s] = passes * self.tokens[s]
            for lo in range(0, into, _SUM_CHUNK):
                local = stream_slice(n, self.seed, s, passes * n + lo,
                                     min(_SUM_CHUNK, into - lo), self.shuffle)
                out[s] += int(np.asarray(self.lengths[s][np.sort(local)]).sum(dtype=np.int64))
        return out
