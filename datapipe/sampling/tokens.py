"""Token plans: which pieces of which documents go in which row of which batch.

Everything is a pure function of (lengths, seed, epoch, settings), so resuming a TokenLoader,
even in the middle of a packing buffer, needs only the batch counter.

A plan is a sequence of *segments* (document, start, end), grouped into *rows* (one sequence
of a batch; for the fixed layout, one packed row of `seq_len` tokens) and rows into *batches*.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from datapipe.errors import ArgumentError

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


def split_documents(order: np.ndarray, lengths: np.ndarray, max_len: int) -> tuple[np.ndarray,
                                                                                   np.ndarray,
                                                                                   np.ndarray]:
    """Documents in `order`, each cut into consecutive pieces of at most `max_len` tokens."""
    doc_len = lengths[order].astype(np.int64)
    pieces = np.maximum(1, -(-doc_len // max_len))
    doc = np.repeat(order, pieces)
    first_piece = np.repeat(np.cumsum(pieces) - pieces, pieces)
    k = np.arange(len(doc)) - first_piece
    start = k * max_len
    end = np.minimum(start + max_len, np.repeat(doc_len, pieces))
    return doc, start, end


def _greedy_cuts(sizes: np.ndarray, budget: int, max_count: int | None) -> np.ndarray:
    """Offsets cutting `sizes` into consecutive groups of total <= budget (each >= 1 item)."""
    cum = np.concatenate([[0], np.cumsum(sizes)])
    cuts, i, n = [0], 0, len(sizes)
    while i < n:
        j = int(np.searchsorted(cum, cum[i] + budget, side="right")) - 1
        j = max(j, i + 1)
        if max_count:
            j = min(j, i + max_count)
        cuts.append(j)
        i = j
    return np.asarray(cuts, dtype=np.int64)


def plan_packed(order: np.ndarray, lengths: np.ndarray, max_tokens: int, pad_multiple: int,
                batch_size: int | None) -> TokenPlan:
    """Documents back to back, cut by token budget; longer documents are split to fit."""
    budget = (max_tokens // pad_multiple) * pad_multiple
    doc, start, end = split_documents(order, lengths, budget)
    batch_offsets = _greedy_cuts(end - start, budget, batch_size)
    return TokenPlan(doc, start, end, np.arange(len(doc) + 1), batch_offsets)


def check_fits_padded(lengths: np.ndarray, max_tokens: int, pad_multiple: int) -> None:
    """Padded rows never split documents: each must fit the budget on its own."""
    too_long = np.flatnonzero(round_up(lengths.astype(np.int64), pad_multiple) > max_tokens)
    if len(too_long):
        d = int(too_long[0])
        raise ArgumentError(
            f"document {d} has {int(lengths[d])} tokens, more than max_tokens={max_tokens} in "
            "layout='padded'; raise max_tokens, or use layout='packed' or 'fixed' (they split "
            "long documents)")


def plan_padded(order: np.ndarray, lengths: np.ndarray, max_tokens: int, pad_multiple: int,
                batch_size: int | None, batch_multiple: int, bucket_batches: int,
                rng: np.random.Generator) -> TokenPlan:
    """Length-bucketed batches: sort each mega-batch by length, then cut so that
    rows x padded length stays within the budget (the length-grouped sampler's recipe)."""
    check_fits_padded(lengths, max_tokens, pad_multiple)
    padded = round_up(lengths[order].astype(np.int64), pad_multiple)
    mean_rows = max(1, max_tokens // max(1, int(padded.mean()) if len(padded) else 1))
    mega = max(1, bucket_batches * mean_rows)
    groups: list[np.ndarray] = []
    for lo in range(0, len(order), mega):
        chunk = order[lo:lo + mega]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        groups.extend(_cut_sorted(chunk, lengths, max_tokens, pad_multiple, batch_size,
                                  batch_multiple))
    groups = [groups[i] for i in rng.permutation(len(groups))]
    doc = np.concatenate(groups) if groups else np.empty(0, dtype=np.int64)
    batch_offsets = np.concatenate([[0], np.cumsum([len(g) for g in groups])]).astype(np.int64)
    zeros = np.zeros(len(doc), dtype=np.int64)
    return TokenPlan(doc, zeros, lengths[doc].astype(np.int64), np.arange(len(doc) + 1),
                     batch_offsets)


def _cut_sorted(chunk: np.ndarray, lengths: np.ndarray, max_tokens: int, pad_multiple: int,
                batch_size: int | None, batch_multiple: int) -> list[np.ndarray]:
    groups, i = [], 0
    while i < len(chunk):
        longest = int(round_up(int(lengths[chunk[i]]), pad_multiple))
        rows = max(1, max_tokens // longest)
        if batch_size:
            rows = min(rows, batch_size)
        if batch_multiple > 1 and rows >= batch_multiple:
            rows = (rows // batch_multiple) * batch_multiple
        groups.append(chunk[i:i + rows])
        i += rows
    return groups


def plan_fixed(order: np.ndarray, lengths: np.ndarray, seq_len: int, rows_per_batch: int,
               pack_window: int, rng: np.random.Generator) -> TokenPlan:
    """Rows of exactly `seq_len` tokens filled by best-fit-decreasing packing of whole
    documents (longer ones split into `seq_len` pieces), packed window by window."""
    doc, start, end = split_documents(order, lengths, seq_len)
    rows: list[np.ndarray] = []
    for lo in range(0, len(doc), pack_window):
        rows.extend(_best_fit_decreasing(end[lo:lo + pack_window] - start[lo:lo + pack_window],
                                         seq_len, lo))
    rows = [rows[i] for i in rng.permutation(len(rows))]
    segs = np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)
    row_offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    batch_offsets = np.append(np.arange(0, len(rows), rows_per_batch), len(rows))
    return TokenPlan(doc[segs], start[segs], end[segs], row_offsets, batch_offsets)


def _best_fit_decreasing(sizes: np.ndarray, capacity: int, base: int) -> list[np.ndarray]:
    """Each item, longest first, goes to the open row it fills most tightly.

    Open rows are kept sorted by the room they have left, so the tightest fit is one bisect.
    """
    rooms: list[int] = []     # room left in each open row, ascending
    room_rows: list[int] = []  # the row each entry of `rooms` belongs to
    members: list[list[int]] = []
    for item in np.argsort(-sizes, kind="stable").tolist():
        size = int(sizes[item])
        i = bisect.bisect_left(rooms, size)
        if i < len(rooms):
            left = rooms.pop(i) - size
            row = room_rows.pop(i)
        else:
            row, left = len(members), capacity - size
            members.append([])
        members[row].append(base + item)
        if left:  # a full row can take nothing more
            j = bisect.bisect_left(rooms, left)
            rooms.insert(j, left)
            room_rows.insert(j, row)
    return [np.asarray(m, dtype=np.int64) for m in members]


def split_by_rank(plan: TokenPlan, rank: int, world_size: int) -> tuple[TokenPlan, np.ndarray]:
    """Round-robin batches over ranks; every rank gets the same count, the shortfall made up by
    repeats flagged as padding (so ranks step together and real batches are seen once)."""
    n = len(plan)
    per_rank = -(-n // world_size) if n else 0
    ids = np.arange(per_rank * world_size)
    is_pad = ids >= n
    ids = np.where(is_pad, ids % max(n, 1), ids)
    mine, pad = ids[rank::world_size], is_pad[rank::world_size]
    rows = [np.arange(plan.batch_offsets[b], plan.batch_offsets[b + 1]) for b in mine]
    segments = [np.arange(plan.row_offsets[r[0]], plan.row_offsets[r[-1] + 1]) if len(r) else
                np.empty(0, np.int64) for r in rows]
    seg = np.concatenate(segments) if segments else np.empty(0, dtype=np.int64)
    row_lens = np.concatenate([np.diff(plan.row_offsets)[r] for r in rows]) if rows else \
        np.empty(0, np.int64)
    row_offsets = np.concatenate([[0], np.cumsum(row_lens)]).astype(np.int64)
    batch_offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    return TokenPlan(plan.doc[seg], plan.start[seg], plan.end[seg], row_offsets,
                     batch_offsets), pad
