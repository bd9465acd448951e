"""Documents longer than the per-sequence cap: split into pieces, truncated, or dropped.

The policy acts on the epoch's documents before any planning, so that a plan stays a pure
function of (lengths, seed, epoch, settings) and a resume at another world size replans what
is left of the very same pieces.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from datapipe.errors import ArgumentError

OVERFLOWS = ("split", "truncate", "drop")


@dataclass(frozen=True)
class Overflow:
    """`cap`: the most tokens one sequence holds; `mode`: what a longer document becomes.
    split: consecutive pieces of at most `cap` (each piece's last target is the next
    piece's first token); truncate: its first `cap` tokens; drop: left out, and counted."""

    cap: int
    mode: str = "split"

    def __post_init__(self) -> None:
        if self.mode not in OVERFLOWS:
            raise ArgumentError(f"overflow must be one of {OVERFLOWS}, got {self.mode!r}")
        if self.cap < 1:
            raise ArgumentError(f"max_seq_len must be >= 1, got {self.cap}")

    def apply(self, order: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the documents of `order` that stay, the lengths the planner sees)."""
        if self.mode == "truncate":
            return order, np.minimum(lengths, self.cap)
        if self.mode == "drop":
            return order[lengths[order] <= self.cap], lengths
        return order, lengths

    def apply_to(self, docs: np.ndarray,
                 lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`apply` for some documents only: (those that stay, their lengths as planned), where
        `lengths` are theirs (a window of an epoch, not the corpus)."""
        if self.mode == "truncate":
            return docs, np.minimum(lengths, self.cap)
        if self.mode == "drop":
            keep = lengths <= self.cap
            return docs[keep], lengths[keep]
        return docs, lengths

    def kept_lengths(self, lengths: np.ndarray) -> np.ndarray:
        """The tokens each document brings to an epoch under the policy (0: dropped): what a
        mixture weighs by tokens."""
        if self.mode == "truncate":
            return np.minimum(lengths, self.cap)
        if self.mode == "drop":
            return np.where(lengths > self.cap, 0, lengths)
        return lengths

    def dropped(self, lengths: np.ndarray) -> tuple[int, int]:
        """(documents left out, tokens left out) of an epoch: what drop and truncate cost."""
        over = lengths > self.cap
        if self.mode == "drop":
            return int(over.sum()), int(lengths[over].sum())
        if self.mode == "truncate":
            return 0, int((lengths[over] - self.cap).sum())
        return 0, 0
