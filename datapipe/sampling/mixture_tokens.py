"""A token-weighted mixture's epoch: which documents of which sources, in which order, before
the token planners (sampling/tokens.py) cut them into batches.

Weights are by tokens (how LLM blends are given) or by documents. With tokens, an epoch has
`epoch_size` tokens and source s contributes its share Q_s of them: epoch e takes the documents
of its stream (mixture_streams.stream_slice) that begin within tokens [e * Q_s, (e + 1) * Q_s)
of it, so what one epoch overshoots by its last document the next one takes less, and a
stream's position after any number of epochs is one search in one permutation's token counts.

The sources' documents are interleaved by token deficit: each document is placed at the
midpoint of the tokens it brings, as a fraction of its source's quota, so that every stretch of
the epoch holds each source close to its weight by tokens. The epoch then goes to the token
planners as one list of documents (`MixtureDocuments.lengths`, in that order), with a map back
to (source, index within the source): their resume (Pieces, TokenRemainder) is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.sampling.elastic import Segment, drawn_prefix
from datapipe.sampling.mixture_streams import stream_slice
from datapipe.sampling.mixture_weights import MixtureWeights, apportion
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
    """Sources of documents with `lengths[s][i]` tokens each, mixed by `weights`."""

    lengths: tuple[np.ndarray, ...]
    weights: MixtureWeights
    weight_by: str = "tokens"
    epoch_size: int | None = None  # tokens or documents (as weight_by); None: the sum
    seed: int = 0
    shuffle: bool = True

    def __post_init__(self) -> None:
        if self.weight_by not in WEIGHT_UNITS:
            raise ArgumentError(f"weight_by must be one of {', '.join(WEIGHT_UNITS)}, got "
                                f"{self.weight_by!r}")
        if len(self.weights.values) != len(self.lengths):
            raise ArgumentError(f"weights has {len(self.weights.values)} weights for "
                                f"{len(self.lengths)} sources")
        for s, lengths in enumerate(self.lengths):
            if not len(lengths) or not lengths.sum():
                raise ArgumentError(f"source {s} is empty: it has no "
                                    f"{'documents' if not len(lengths) else 'tokens'}")
        if self.epoch_size is not None and self.epoch_size < 1:
            raise ArgumentError(f"epoch_size must be >= 1 {self.weight_by}, got "
                                f"{self.epoch_size}")

    def identity(self) -> dict[str, object]:
        """What a state saved over this mixture must match (see Mixture.identity)."""
        return {"weights": list(self.weights.values), "weight_by": self.weight_by,
                "epoch_size": sum(self._sizes()) if self.epoch_size is None
                else self.epoch_size}

    @property
    def by_tokens(self) -> bool:
        return self.weight_by == "tokens"

    def _sizes(self) -> list[int]:
        """Each source's size in the weights' unit."""
        return [int(n.sum()) if self.by_tokens else len(n) for n in self.lengths]

    @property
    def quota(self) -> list[int]:
        """Each source's share of an epoch, in the weights' unit."""
        size = sum(self._sizes()) if self.epoch_size is None else self.epoch_size
        return apportion(size, self.weights.shares)

    def stream_position(self, source: int, epoch: int,
                        cache: dict | None = None) -> tuple[int, int]:
        """(documents, tokens) of source's stream that the epochs before `epoch` drew."""
        lengths = self.lengths[source].astype(np.int64)
        mark = epoch * self.quota[source]
        if not self.by_tokens:
            return mark, _tokens_up_to(self, source, mark, cache)
        # The first document that begins at or after `mark` tokens of the stream.
        total, n = int(lengths.sum()), len(lengths)
        cycle, into = divmod(mark, total)
        perm = stream_slice(n, self.seed, source, cycle * n, n, self.shuffle, cache)
        begins = np.cumsum(lengths[perm]) - lengths[perm]
        first = int(np.searchsorted(begins, into, side="left"))
        tokens = cycle * total + (int(begins[first]) if first < n else total)
        return cycle * n + first, tokens

    def epoch(self, epoch: int) -> MixtureDocuments:
        """The documents of epoch `epoch`, interleaved by token (or document) deficit."""
        keys, sources, locals_, lengths = [], [], [], []
        cache: dict = {}  # each permutation made once, for both ends and the slice
        before = [self.stream_position(s, epoch, cache) for s in range(len(self.lengths))]
        after = [self.stream_position(s, epoch + 1, cache) for s in range(len(self.lengths))]
        for s, ((lo, _), (hi, _)) in enumerate(zip(before, after, strict=True)):
            local = stream_slice(len(self.lengths[s]), self.seed, s, lo, hi - lo, self.shuffle,
                                 cache)
            size = self.lengths[s][local].astype(np.int64)
            amount = size if self.by_tokens else np.ones(len(size), dtype=np.int64)
            midpoint = np.cumsum(amount) - amount / 2
            keys.append(midpoint / max(1, self.quota[s]))
            sources.append(np.full(len(local), s, dtype=np.int64))
            locals_.append(local)
            lengths.append(size)
        order = np.argsort(np.concatenate(keys), kind="stable")  # ties: the earlier source
        return MixtureDocuments(np.concatenate(lengths)[order], np.concatenate(sources)[order],
                                np.concatenate(locals_)[order],
                                np.array([d for d, _ in before], dtype=np.int64),
                                np.array([t for _, t in before], dtype=np.int64))


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
