"""Token plans: which pieces of which documents go in which row of which batch.

Everything is a pure function of (lengths, seed, epoch, settings), so resuming a TokenLoader,
even in the middle of a packing buffer, needs only the batch counter. Resuming at another world
size plans the pieces of documents not drawn yet again, with the same planner.

A plan is a sequence of *segments* (document, start, end), grouped into *rows* (one sequence
of a batch; for the fixed layout, one packed row of `seq_len` tokens) and rows into *batches*.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.sampling.groups import follow_cuts, offsets, ranges

LAYOUTS = ("packed", "padded", "fixed")


def round_up(n: np.ndarray | int, multiple: int) -> np.ndarray | int:
    return -(-n // multiple) * multiple


@dataclass(frozen=True)
class TokenPlan:
    doc: np.ndarray            # per segment: document id
    start: np.ndarray          # per segment: first token
    end: np.ndarray            # per segment: one past the last token
    row_offsets: np.ndarray    # rows: segments row_offsets[r] .. row_offsets[r+1]
    batch_offsets: np.ndarray  # batches: rows batch_offsets[b] .. batch_offsets[b+1]

    def __len__(self) -> int:
        return len(self.batch_offsets) - 1

    def batch(self, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(doc, start, end, row offsets relative to the batch's first segment)."""
        r0, r1 = self.batch_offsets[b], self.batch_offsets[b + 1]
        s0, s1 = self.row_offsets[r0], self.row_offsets[r1]
        return (self.doc[s0:s1], self.start[s0:s1], self.end[s0:s1],
                self.row_offsets[r0:r1 + 1] - s0)

    def take(self, batches: np.ndarray) -> TokenPlan:
        """The plan of these batches, in this order (a batch may come more than once)."""
        first_row, rows = self.batch_offsets[batches], np.diff(self.batch_offsets)[batches]
        first_seg = self.row_offsets[first_row]
        segs = ranges(first_seg, self.row_offsets[first_row + rows] - first_seg)
        row_segs = np.diff(self.row_offsets)[ranges(first_row, rows)]
        return TokenPlan(self.doc[segs], self.start[segs], self.end[segs], offsets(row_segs),
                         offsets(rows))


@dataclass(frozen=True)
class Pieces:
    """Token ranges of documents, in the order a planner takes them: whole documents in epoch
    order, or what is left of them when an epoch is resumed at another world size."""

    doc: np.ndarray
    start: np.ndarray
    end: np.ndarray

    @property
    def sizes(self) -> np.ndarray:
        return self.end - self.start


def split_documents(pieces: Pieces, max_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each piece cut into consecutive parts of at most `max_len` tokens."""
    sizes = pieces.sizes
    parts = np.maximum(1, -(-sizes // max_len))
    doc = np.repeat(pieces.doc, parts)
    first_part = np.repeat(np.cumsum(parts) - parts, parts)
    k = np.arange(len(doc)) - first_part
    start = np.repeat(pieces.start, parts) + k * max_len
    end = np.minimum(start + max_len, np.repeat(pieces.end, parts))
    return doc, start, end


def _greedy_cuts(sizes: np.ndarray, budget: int, max_count: int | None) -> np.ndarray:
    """Offsets cutting `sizes` into consecutive groups of total <= budget (each >= 1 item)."""
    cum = offsets(sizes)
    first = np.arange(len(sizes))
    ends = np.maximum(np.searchsorted(cum, cum[:-1] + budget, side="right") - 1, first + 1)
    if max_count:
        ends = np.minimum(ends, first + max_count)
    return follow_cuts(ends)


def plan_packed(pieces: Pieces, max_tokens: int, pad_multiple: int,
                batch_size: int | None, max_len: int | None = None) -> TokenPlan:
    """Documents back to back, cut by token budget; longer documents (or longer than
    `max_len`) are split to fit."""
    budget = (max_tokens // pad_multiple) * pad_multiple
    doc, start, end = split_documents(pieces, min(budget, max_len or budget))
    batch_offsets = _greedy_cuts(end - start, budget, batch_size)
    return TokenPlan(doc, start, end, np.arange(len(doc) + 1), batch_offsets)


def check_fits_padded(lengths: np.ndarray, max_tokens: int, pad_multiple: int,
                      docs: np.ndarray | None = None) -> None:
    """Padded rows never split documents: each must fit the budget on its own (`docs`: the
    document of each length, if not its position)."""
    padded = round_up(lengths.astype(np.int64), pad_multiple)
    too_long = np.flatnonzero(padded > max_tokens)
    if len(too_long):
        i = int(too_long[0])
        d = i if docs is None else int(docs[i])
        rounded = (f" ({int(padded[i])} padded to a multiple of {pad_multiple})"
                   if padded[i] != lengths[i] else "")
        raise ArgumentError(
            f"document {d} has {int(lengths[i])} tokens{rounded}, more than "
            f"max_tokens={max_tokens} in layout='padded'; pass overflow='truncate' (keep its "
            "first tokens) or overflow='drop' (leave it out), raise max_tokens, or use "
            "layout='packed' or 'fixed' (they split long documents)")


def plan_padded(pieces: Pieces, max_tokens: int, pad_multiple: int, batch_size: int | None,
                batch_multiple: int, bucket_batches: int,
                rng: np.random.Generator | None) -> TokenPlan:
    """Length-bucketed batches: sort each mega-batch by length, then cut so that
    rows x padded length stays within the budget (the length-grouped sampler's recipe).
    Pieces are whole documents here: padded rows never split one. rng None (no shuffle):
    documents in their order, each batch as many as fit the budget at its longest."""
    if rng is None:
        return _plan_padded_in_order(pieces, max_tokens, pad_multiple, batch_size,
                                     batch_multiple)
    sizes = pieces.sizes
    check_fits_padded(sizes, max_tokens, pad_multiple, pieces.doc)
    padded = round_up(sizes, pad_multiple)
    mean_rows = max(1, max_tokens // max(1, int(padded.mean()) if len(padded) else 1))
    # Any mega-batch larger than all the pieces holds them all: capped, so that it fits numpy's
    # int64 (max_tokens may be 2**62).
    mega = min(max(1, bucket_batches * mean_rows), max(1, len(sizes)))
    # The nearest whole number of mega-batches, of equal size: a short last one (a window's
    # remainder) would sort few documents and pad its batches to lengths far apart.
    count = max(1, round(len(sizes) / mega))
    mega_batch = np.arange(len(sizes)) * count // max(1, len(sizes))
    longest_first = np.lexsort((-sizes, mega_batch))  # within each mega-batch, ties in order
    mega_end = -(-(mega_batch + 1) * len(sizes) // count)
    cuts = follow_cuts(_bucket_ends(padded[longest_first], mega_end, max_tokens, batch_size,
                                    batch_multiple))
    rows = np.diff(cuts)
    shuffled = rng.permutation(len(rows))
    at = longest_first[ranges(cuts[shuffled], rows[shuffled])]
    return TokenPlan(pieces.doc[at], pieces.start[at], pieces.end[at], np.arange(len(at) + 1),
                     offsets(rows[shuffled]))


def _plan_padded_in_order(pieces: Pieces, max_tokens: int, pad_multiple: int,
                          batch_size: int | None, batch_multiple: int) -> TokenPlan:
    """Consecutive documents per batch, as many as fit the budget at their longest (rounded
    down to `batch_multiple` rows where there are that many). A step per document, at
    planning time only."""
    sizes = pieces.sizes
    check_fits_padded(sizes, max_tokens, pad_multiple, pieces.doc)
    padded = round_up(sizes, pad_multiple).tolist()
    cuts, first = [0], 0
    while first < len(padded):
        longest, last = padded[first], first + 1
        while last < len(padded) and max(longest, padded[last]) * (last - first + 1) \
                <= max_tokens and not (batch_size and last - first >= batch_size):
            longest, last = max(longest, padded[last]), last + 1
        rows = last - first
        if rows >= batch_multiple:
            rows -= rows % batch_multiple
        first += rows
        cuts.append(first)
    return TokenPlan(pieces.doc, pieces.start, pieces.end, np.arange(len(sizes) + 1),
                     np.asarray(cuts, dtype=np.int64))


def _bucket_ends(padded: np.ndarray, mega_end: np.ndarray, max_tokens: int,
                 batch_size: int | None, batch_multiple: int) -> np.ndarray:
    """Where a batch that begins at each place of the longest-first order ends: as many rows
    of its first (longest) document's padded length as the budget holds, within its
    mega-batch."""
    rows = np.maximum(1, max_tokens // np.maximum(1, padded))  # empty documents come last
    if batch_size:
        rows = np.minimum(rows, batch_size)
    if batch_multiple > 1:
        rows = np.where(rows >= batch_multiple, rows // batch_multiple * batch_multiple, rows)
    place = np.arange(len(padded))
    return place + np.minimum(rows, mega_end - place)


def plan_fixed(pieces: Pieces, seq_len: int, rows_per_batch: int, pack_window: int,
               rng: np.random.Generator | None, max_len: int | None = None) -> TokenPlan:
    """Rows of exactly `seq_len` tokens filled by best-fit-decreasing packing of whole
    documents (longer ones split into pieces of `seq_len`, or `max_len`), packed window by
    window. rng None (no shuffle): documents fill rows in their order, back to back."""
    doc, start, end = split_documents(pieces, min(seq_len, max_len or seq_len))
    if rng is None:
        packed, row_of, num_rows = _pack_in_order(end - start, seq_len)
    else:
        packed, row_of, num_rows = _pack_windows(end - start, seq_len, pack_window)
    shuffled = np.arange(num_rows) if rng is None else rng.permutation(num_rows)
    place = np.empty(num_rows, dtype=np.int64)
    place[shuffled] = np.arange(num_rows)
    segs = packed[np.argsort(place[row_of], kind="stable")]  # in a row: in packing order
    row_offsets = offsets(np.bincount(row_of, minlength=num_rows)[shuffled])
    batch_offsets = np.append(np.arange(0, num_rows, rows_per_batch), num_rows)
    return TokenPlan(doc[segs], start[segs], end[segs], row_offsets, batch_offsets)


def _pack_in_order(sizes: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Next-fit: each item goes to the last row if it fits there, else opens a row."""
    row_of = np.empty(len(sizes), dtype=np.int64)
    row, room = -1, 0
    for i, size in enumerate(sizes.tolist()):
        if size > room or row < 0:
            row, room = row + 1, capacity
        row_of[i], room = row, room - size
    return np.arange(len(sizes)), row_of, row + 1


def _pack_windows(sizes: np.ndarray, capacity: int,
                  window: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Best-fit-decreasing packing of each window of `window` items: (every item in packing
    order, the row each goes to, the number of rows); rows are numbered as they open."""
    packed = np.empty(len(sizes), dtype=np.int64)
    row_of = np.empty(len(sizes), dtype=np.int64)
    num_rows = 0
    for lo in range(0, len(sizes), window):
        hi = min(lo + window, len(sizes))
        order, rows, opened = _best_fit_decreasing(sizes[lo:hi], capacity)
        packed[lo:hi], row_of[lo:hi] = lo + order, num_rows + rows
        num_rows += opened
    return packed, row_of, num_rows


def _best_fit_decreasing(sizes: np.ndarray,
                         capacity: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Each item, longest first, goes to the open row it fills most tightly: (the items in
    that order, the row each goes to, the number of rows opened).

    Open rows are kept sorted by the room they have left, so the tightest fit is one bisect.
    """
    rooms: list[int] = []     # room left in each open row, ascending
    room_rows: list[int] = []  # the row each entry of `rooms` belongs to
    order = np.argsort(-sizes, kind="stable")
    row_of: list[int] = []
    opened = 0
    for size in sizes[order].tolist():
        i = bisect.bisect_left(rooms, size)
        if i < len(rooms):
            left = rooms.pop(i) - size
            row = room_rows.pop(i)
        else:
            row, left = opened, capacity - size
            opened += 1
        row_of.append(row)
        if left:  # a full row can take nothing more
            j = bisect.bisect_left(rooms, left)
            rooms.insert(j, left)
            room_rows.insert(j, row)
    return order, np.asarray(row_of, dtype=np.int64), opened
