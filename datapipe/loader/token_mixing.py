"""TokenLoader's side of a mixture: each epoch's documents (sampling/mixture_tokens.py), their
combined ids for the workers, a batch's `source` beside its `index`, and what each source gave
so far."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from datapipe.errors import ArgumentError
from datapipe.loader.mixing import MixtureSetup
from datapipe.loader.progress_state import LoaderPosition
from datapipe.sampling.mixture_tokens import (
    WEIGHT_UNITS,
    MixtureDocuments,
    TokenMixture,
    drawn_in_token_epoch,
)
from datapipe.sampling.tokens import TokenRemainder

_CACHED_EPOCHS = 2  # the epoch under way and the next one, which workers start on early


class TokenMixing:
    """A TokenLoader's mixture of `source_lengths` (per source, per document: its tokens)."""

    def __init__(self, setup: MixtureSetup, source_lengths: Sequence[np.ndarray],
                 weight_by: str, epoch_size: int | None, seed: int, shuffle: bool) -> None:
        if weight_by not in WEIGHT_UNITS:
            raise ArgumentError(f"weight_by must be one of {', '.join(WEIGHT_UNITS)}, got "
                                f"{weight_by!r}")
        self.setup = setup
        self.names = setup.sources.names
        sizes = [int(n.sum()) if weight_by == "tokens" else len(n) for n in source_lengths]
        self.schedule = setup.schedule(sizes)
        if len(self.schedule.phases) > 1:
            raise ArgumentError("weights: TokenLoader takes one set of weights; phases of "
                                "weights, (start_step, weights) pairs, are for Loader")
        self.mixture = TokenMixture(tuple(source_lengths), self.schedule.phases[0].weights,
                                    weight_by, epoch_size, seed, shuffle)
        counts = [len(n) for n in source_lengths]
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._epochs: dict[int, MixtureDocuments] = {}

    def epoch(self, epoch: int) -> MixtureDocuments:
        """The epoch's documents in planning order (made once, kept while it is planned)."""
        docs = self._epochs.get(epoch)
        if docs is None:
            while len(self._epochs) >= _CACHED_EPOCHS:
                del self._epochs[next(iter(self._epochs))]
            docs = self._epochs[epoch] = self.mixture.epoch(epoch)
        return docs

    def combined_ids(self, epoch: int) -> np.ndarray:
        """Per document of the epoch, its id in the sources read as one (ConcatDataset)."""
        docs = self.epoch(epoch)
        return self.offsets[docs.source] + docs.local

    def max_epoch_tokens(self) -> int:
        """The most tokens an epoch can hold: each source's quota, overshot by at most its
        longest document (by tokens), or its quota of its longest documents."""
        lengths = self.mixture.lengths
        if self.mixture.by_tokens:
            return sum(q + int(n.max()) for q, n in zip(self.mixture.quota, lengths,
                                                        strict=True))
        return sum(q * int(n.max()) for q, n in zip(self.mixture.quota, lengths, strict=True))

    def split_index(self, batch: dict[str, Any]) -> None:
        """A batch's combined `index` into `source` and the id within the source (-1 stays
        -1 in both: the padding tail)."""
        combined = batch["index"].numpy()
        source = np.searchsorted(self.offsets, combined, side="right") - 1
        filler = combined < 0
        local = combined - self.offsets[np.maximum(source, 0)]
        source[filler], local[filler] = -1, -1
        batch["index"] = torch.from_numpy(local)
        batch["source"] = torch.from_numpy(source.astype(np.int64, copy=False))

    def identity(self) -> dict[str, Any]:
        return self.setup.identity(self.mixture.identity())

    def progress(self, position: LoaderPosition, world_size: int,
                 start: TokenRemainder) -> dict[str, dict[str, int]]:
        """Documents and tokens each source gave up to `position`, all ranks together: the
        epochs before whole, then this one's batches handed out (`start`: its plan)."""
        docs = self.epoch(position.epoch)
        documents, tokens = drawn_in_token_epoch(start, position.segments, world_size,
                                                 position.batches_done, docs, len(self.names))
        documents += docs.documents_before
        tokens += docs.tokens_before
        return {name: {"documents": int(d), "tokens": int(t)}
                for name, d, t in zip(self.names, documents, tokens, strict=True)}


def single_source_progress(name: str, position: LoaderPosition, world_size: int,
                           start: TokenRemainder, documents_per_epoch: int,
                           tokens_per_epoch: int) -> dict[str, dict[str, int]]:
    """`TokenMixing.progress` for one dataset: the epochs before each gave all it plans."""
    docs = MixtureDocuments(np.zeros(0, np.int64), np.zeros(len(start.epoch_place), np.int64),
                            np.zeros(0, np.int64), np.zeros(1, np.int64),
                            np.zeros(1, np.int64))
    documents, tokens = drawn_in_token_epoch(start, position.segments, world_size,
                                             position.batches_done, docs, 1)
    return {name: {"documents": int(documents[0]) + position.epoch * documents_per_epoch,
                   "tokens": int(tokens[0]) + position.epoch * tokens_per_epoch}}

