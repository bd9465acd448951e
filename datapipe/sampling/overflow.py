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

    def kept(self, values: np.ndarray) -> np.ndarray:
        """The tokens each of these documents brings to an epoch under the policy (0:
        dropped)."""
        if self.mode == "truncate":
            return np.minimum(values, self.cap)
        if self.mode == "drop":
            return np.where(values > self.cap, 0, values)
        return values

    def kept_lengths(self, lengths: np.ndarray) -> KeptLengths | np.ndarray:
        """Every document's kept tokens, looked up as asked (what a mixture weighs by
        tokens): no array the size of the corpus."""
        return lengths if self.mode == "split" else KeptLengths(lengths, self)

    def dropped(self, lengths: np.ndarray) -> tuple[int, int]:
        """(documents left out, tokens left out) of an epoch: what drop and truncate cost,
        counted a chunk at a time (a corpus of 10^9 lengths needs no 10^9 temporaries)."""
        documents = tokens = 0
        if self.mode == "split":
            return 0, 0
        for chunk in _chunks(lengths):
            over = chunk[chunk > self.cap]
            documents += len(over)
            tokens += int(over.sum(dtype=np.int64)) - (
                self.cap * len(over) if self.mode == "truncate" else 0)
        return (documents if self.mode == "drop" else 0), tokens


class KeptLengths:
    """A source's lengths as the overflow policy keeps them, per lookup, over its memory-mapped
    index: `len`, indexing by position or array, and `sum`."""

    def __init__(self, lengths: np.ndarray, overflow: Overflow) -> None:
        self.lengths, self.overflow = lengths, overflow
        self.dtype = lengths.dtype

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, at: np.ndarray | int | slice) -> np.ndarray:
        return self.overflow.kept(self.lengths[at])

    def sum(self, dtype: type | None = None) -> int:
        return sum(int(self.overflow.kept(c).sum(dtype=np.int64)) for c in _chunks(self.lengths))


_CHUNK = 1 << 22  # lengths per pass: 32 MB of int64 temporaries at most


def _chunks(lengths: np.ndarray) -> list[np.ndarray]:
    return [lengths[i:i + _CHUNK] for i in range(0, len(lengths), _CHUNK)]
