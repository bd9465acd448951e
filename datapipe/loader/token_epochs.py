"""How TokenLoader plans an epoch: a window of documents at a time (sampling/token_windows.py),
the documents of one dataset in a shuffle computed per position, a mixture's interleaved a
window at a time (sampling/mixture_tokens.py); and a rank's share of it, in the shape the batch
producer asks for."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.loader.token_plans import WindowedRankPlan
from datapipe.sampling.order import KeyedOrder
from datapipe.sampling.overflow import Overflow
from datapipe.sampling.token_windows import TokenStream, TokenWindows
from datapipe.sampling.tokens import (
    Pieces,
    TokenPlan,
    plan_fixed,
    plan_packed,
    plan_padded,
)

_UNBOUNDED = 1 << 62  # no max_tokens: a budget no batch reaches (and int64 still holds)


@dataclass(frozen=True)
class TokenEpochPlanner:
    """A TokenLoader's settings that fix its batches, and the documents' lengths."""

    layout: str
    max_tokens: int | None
    batch_size: int | None
    seq_len: int
    rows_per_batch: int
    pad_to_multiple_of: int
    batch_multiple_of: int
    bucket_batches: int
    pack_window: int
    plan_window: int
    shuffle: bool
    seed: int
    overflow: Overflow | None
    lengths: np.ndarray  # per document (a mixture's: in combined order)
    mixing: Any = None  # a TokenMixing, or None for one dataset
    # The next window planned in a thread. Without workers every batch is built on the calling
    # thread, which a planning thread only competes with for the GIL (measured: 5 % slower).
    plan_ahead: bool = True

    def documents(self, epoch: int) -> int:
        """Places in epoch `epoch`'s order."""
        return len(self.lengths) if self.mixing is None else self.mixing.documents(epoch)

    def epoch(self, epoch: int) -> TokenStream:
        """Epoch `epoch` before any batch is drawn."""
        windows = -(-self.documents(epoch) // self.plan_window)
        return TokenStream(TokenWindows(windows, functools.partial(self.window, epoch),
                                        None if self.mixing is None else self.mixing.source_of,
                                        self.plan_ahead))

    def window(self, epoch: int, w: int) -> TokenPlan:
        """All ranks' batches of window w: the documents at its places of the epoch's order."""
        n = self.documents(epoch)
        lo, hi = w * self.plan_window, min((w + 1) * self.plan_window, n)
        if self.mixing is None:
            docs = KeyedOrder(n, self.seed, epoch, self.shuffle).at(np.arange(lo, hi))
        else:
            docs = self.mixing.window(epoch, lo, hi)
        lengths = np.asarray(self.lengths[docs], dtype=np.int64)
        if self.overflow is not None:
            docs, lengths = self.overflow.apply_to(docs, lengths)
        return self.batches(epoch, Pieces(docs, np.zeros(len(docs), np.int64), lengths), (w,))

    def batches(self, epoch: int, pieces: Pieces, window: tuple[int, ...] = ()) -> TokenPlan:
        """All ranks' batches of `pieces` (a window, a mixture's epoch or what is left of it),
        in drawing order."""
        rng = (np.random.default_rng([self.seed, epoch, 0x70C, *window]) if self.shuffle
               else None)
        cap = self.overflow.cap if self.overflow is not None else None
        budget = self.max_tokens or _UNBOUNDED
        if self.layout == "packed":
            return plan_packed(pieces, budget, self.pad_to_multiple_of, self.batch_size, cap)
        if self.layout == "padded":
            return plan_padded(pieces, budget, self.pad_to_multiple_of, self.batch_size,
                               self.batch_multiple_of, self.bucket_batches, rng)
        return plan_fixed(pieces, self.seq_len, self.rows_per_batch, self.pack_window, rng, cap)

    def rank_plan(self, rest: TokenStream, rank: int, world_size: int) -> WindowedRankPlan:
        # A truncated document's rest is not trained on: its last target stays -100.
        carry = self.overflow is None or self.overflow.mode == "split"
        lengths = self.lengths if carry else None
        return WindowedRankPlan(rest.rank_plan(rank, world_size), lengths)
