"""An even merge of several sources by count, computed per place: which source's which item
sits at any place, and how many of each come before any place, without the places before it.

The sources are split in halves, recursively, and each split is Bresenham's line: of the
first p places of a stretch of N holding L of the left half, floor((p * L + N // 2) / N) are
the left half's. So every source's items are spread evenly (any prefix holds each within two of
its share), a place costs one pass down the tree, and a prefix's counts are a formula per
level. Token mixtures interleave their sources' documents with it, and bucketed image batches
their buckets' batches.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def interleave(counts: Sequence[int], places: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(source, rank within the source) of each of `places` (int64, each in [0, sum(counts)))
    in the even merge of sources with `counts` items."""
    source = np.empty(len(places), dtype=np.int64)
    rank = np.empty(len(places), dtype=np.int64)
    _split(list(counts), 0, len(counts), np.arange(len(places)), places, source, rank)
    return source, rank


def _split(counts: list[int], lo: int, hi: int, at: np.ndarray, places: np.ndarray,
           source: np.ndarray, rank: np.ndarray) -> None:
    if hi - lo == 1 or not len(at):
        source[at], rank[at] = lo, places
        return
    mid = (lo + hi) // 2
    total, left = sum(counts[lo:hi]), sum(counts[lo:mid])
    before = (places * left + total // 2) // total
    is_left = ((places + 1) * left + total // 2) // total > before
    _split(counts, lo, mid, at[is_left], before[is_left], source, rank)
    _split(counts, mid, hi, at[~is_left], (places - before)[~is_left], source, rank)


def prefix(counts: Sequence[int], places: int) -> list[int]:
    """How many items of each source the first `places` places of the merge hold."""
    out = [0] * len(counts)
    _prefix(list(counts), 0, len(counts), places, out)
    return out


def _prefix(counts: list[int], lo: int, hi: int, places: int, out: list[int]) -> None:
    if hi - lo == 1 or not places:
        out[lo] += places
        return
    mid = (lo + hi) // 2
    total, left = sum(counts[lo:hi]), sum(counts[lo:mid])
    before = (places * left + total // 2) // total
    _prefix(counts, lo, mid, before, out)
    _prefix(counts, mid, hi, places - before, out)
