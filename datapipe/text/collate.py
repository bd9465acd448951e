"""Turn the gathered tokens of a batch into model inputs, in one of three layouts.

Labels are shifted by default: ``labels[i]`` is the token after ``input_ids[i]`` in the same
document, and -100 (ignored by cross-entropy) where that next token does not count: at each
document's end, on padding, on a token the loss mask leaves out. A model computes
``cross_entropy(logits.view(-1, V), labels.view(-1), ignore_index=-100)`` with no further
shift. A piece of a split document keeps its last target: the first token of the next piece.
HF's convention and the optional fields are in `datapipe.text.fields` and `labels`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from datapipe.format.concat import SOURCE_FIELD
from datapipe.text.fields import FLASH_FIELDS, VARLEN_FIELDS, BatchFields
from datapipe.text.labels import (
    IGNORE,
    hf_labels,
    positions,
    sequence_ids,
    shifted_labels,
)

# The padding tail's document (and source): made once, the training thread concatenates it.
_NO_DOCUMENT = np.array([-1], dtype=np.int64)
# Keys holding one value per token: shaped (1, T) in a packed batch with batch_dim.
PER_TOKEN = ("input_ids", "labels", "position_ids", "shift_labels", "seq_idx", "loss_mask")


@dataclass(frozen=True)
class CollateOptions:
    layout: str
    pad_id: int = 0
    pad_to_multiple_of: int = 1
    seq_len: int = 0
    fields: BatchFields = field(default_factory=BatchFields)


@dataclass(frozen=True)
class Gathered:
    """What the workers gathered beside the ids, per segment (`docs`, `starts`: the document
    and where in it the segment begins; `after`: the target of its last token, -100 at a
    document's end; `sources`: a mixture's source of the document, None for one dataset) and
    per token (`mask`: the dataset's loss mask, None without one)."""

    docs: np.ndarray
    starts: np.ndarray
    after: np.ndarray
    mask: np.ndarray | None = None
    sources: np.ndarray | None = None


@dataclass
class _Sequences:
    """The flat run of sequences a layout computes over: real segments and padding ones."""

    ids: np.ndarray
    lengths: np.ndarray      # per sequence
    is_filler: np.ndarray    # per sequence: padding, no document
    real: int | np.ndarray   # the first `real` tokens are documents' (packed), or per token
    after: np.ndarray        # per sequence
    starts: np.ndarray       # per sequence
    docs: np.ndarray         # per sequence, -1 for padding
    mask: np.ndarray | None  # per token
    sources: np.ndarray | None = None  # per sequence, -1 for padding (a mixture's)


def collate(tokens: np.ndarray, seg_lengths: np.ndarray, row_offsets: np.ndarray,
            options: CollateOptions, pieces: Gathered | None = None) -> dict[str, Any]:
    """`tokens`: every segment's ids back to back; `row_offsets`: segments per row."""
    ids = tokens.astype(np.int64)
    if pieces is None:  # whole documents numbered in order, nothing carried across a cut
        count = len(seg_lengths)
        pieces = Gathered(np.arange(count), np.zeros(count, np.int64), np.full(count, IGNORE))
    if options.layout == "padded":
        return _padded(ids, seg_lengths, pieces, options)
    if options.layout == "packed":
        seqs = _packed_sequences(ids, seg_lengths, pieces, options)
        return _finish(seqs, options, (len(seqs.ids),))
    seqs = _fixed_sequences(ids, seg_lengths, row_offsets, pieces, options)
    return _finish(seqs, options, (len(row_offsets) - 1, options.seq_len))


def _packed_sequences(ids: np.ndarray, lengths: np.ndarray, pieces: Gathered,
                      options: CollateOptions) -> _Sequences:
    real = len(ids)
    extra = int(-real % options.pad_to_multiple_of)
    mask = pieces.mask
    if not extra:  # the arrays as they are: no copy on the training thread
        return _Sequences(ids, lengths, np.zeros(len(lengths), bool), real, pieces.after,
                          pieces.starts, pieces.docs, mask, pieces.sources)
    filler = np.array([extra], dtype=np.int64)  # one dummy tail: a multiple (Tensor Cores)
    return _Sequences(
        ids=np.concatenate([ids, np.full(extra, options.pad_id, dtype=np.int64)]),
        lengths=np.concatenate([lengths, filler]),
        is_filler=np.concatenate([np.zeros(len(lengths), bool), np.ones(len(filler), bool)]),
        real=real,
        after=np.concatenate([pieces.after, np.full(len(filler), IGNORE)]),
        starts=np.concatenate([pieces.starts, np.zeros(len(filler), np.int64)]),
        docs=np.concatenate([pieces.docs, _NO_DOCUMENT]),
        mask=None if mask is None else np.concatenate([mask, np.zeros(extra, mask.dtype)]),
        sources=None if pieces.sources is None else np.concatenate([pieces.sources,
                                                                    _NO_DOCUMENT]))


def _fixed_sequences(ids: np.ndarray, lengths: np.ndarray, row_offsets: np.ndarray,
                     pieces: Gathered, options: CollateOptions) -> _Sequences:
    """Rows of exactly seq_len; each row's free tail is a padding sequence of its own, so
    cu_seqlens over the flattened batch keeps attention inside documents."""
    seq_len, rows = options.seq_len, len(row_offsets) - 1
    row_fill = np.add.reduceat(lengths, row_offsets[:-1]) if len(lengths) else np.zeros(rows,
                                                                                        np.int64)
    if rows and len(lengths):
        row_fill[np.diff(row_offsets) == 0] = 0
    tails = seq_len - row_fill
    # Sequence lengths over the flattened batch: each row's segments, then its tail (kept
    # only where the row has one, so that cu_seqlens has no empty padding sequence).
    place = _TailPlaces(row_offsets[1:], tails > 0, len(lengths))
    seq_lengths = place.merge(lengths, tails[place.kept_tails])
    is_tail = place.merge(np.zeros(len(lengths), dtype=bool), True)
    real = np.repeat(~is_tail, seq_lengths)
    flat = np.full(rows * seq_len, options.pad_id, dtype=np.int64)
    flat[real] = ids
    mask = None
    if pieces.mask is not None:
        mask = np.zeros(rows * seq_len, dtype=pieces.mask.dtype)
        mask[real] = pieces.mask
    return _Sequences(
        ids=flat, lengths=seq_lengths, is_filler=is_tail, real=real,
        after=place.merge(pieces.after, IGNORE), starts=place.merge(pieces.starts, 0),
        docs=place.merge(pieces.docs, -1), mask=mask,
        sources=None if pieces.sources is None else place.merge(pieces.sources, -1))


class _TailPlaces:
    """Where each row's padding tail goes among the segments: after the row's last segment
    (`ends`, the rows' end offsets), only for the rows whose tail is not empty (`kept`). Placed
    once a batch; `merge` then writes a field's segments and its tails' value in one pass
    each (np.insert and a boolean filter per field took twice as long on the training thread)."""

    def __init__(self, ends: np.ndarray, kept: np.ndarray, segments: int) -> None:
        self.kept_tails = kept
        ends = ends[kept]
        self.size = segments + len(ends)
        # Segment i moves right by the kept tails placed before it; tail j lands after the
        # segments of its row and the j tails before it.
        self.tails = ends + np.arange(len(ends))
        self.segments = np.arange(segments) + np.searchsorted(ends, np.arange(segments),
                                                              side="right")

    def merge(self, values: np.ndarray, tail: Any) -> np.ndarray:
        out = np.empty(self.size, dtype=values.dtype)
        out[self.segments] = values
        out[self.tails] = tail
        return out


def _finish(seqs: _Sequences, options: CollateOptions, shape: tuple[int, ...]) -> dict[str, Any]:
    """The keys of a layout whose sequences are cu_seqlens over the flattened batch."""
    fields = options.fields
    shifted = None  # made only when a key holds it: the training thread waits on this
    if fields.labels == "shifted" or fields.wants("shift_labels") or fields.wants("loss_mask"):
        shifted = _blank(shifted_labels(seqs.ids, seqs.lengths, seqs.after, seqs.mask),
                         seqs.real)
    labels = shifted
    if fields.labels == "hf":
        labels = _blank(hf_labels(seqs.ids, seqs.lengths, seqs.mask), seqs.real)
    cu = np.zeros(len(seqs.lengths) + 1, dtype=np.int32)
    np.cumsum(seqs.lengths, out=cu[1:])
    max_seqlen = int(seqs.lengths.max()) if len(seqs.lengths) else 0
    starts = seqs.starts if fields.continue_positions else None
    real = seqs.real if isinstance(seqs.real, int) else int(np.count_nonzero(seqs.real))
    per_token = {"input_ids": seqs.ids, "labels": labels,
                 "position_ids": positions(seqs.lengths, starts)}
    if fields.wants("shift_labels"):
        per_token["shift_labels"] = shifted
    if fields.wants("seq_idx"):
        per_token["seq_idx"] = sequence_ids(seqs.lengths)
    if fields.wants("loss_mask"):
        per_token["loss_mask"] = (shifted != IGNORE).astype(np.float32)
    batch: dict[str, Any] = {key: _shaped(value, shape, fields) for key, value in
                             per_token.items()}
    if options.layout == "fixed":
        batch["attention_mask"] = _shaped(seqs.real.astype(np.int64), shape, fields)
    cu_seqlens = torch.from_numpy(cu)
    batch.update({"cu_seqlens": cu_seqlens, "max_seqlen": max_seqlen})
    for name in (*FLASH_FIELDS, *VARLEN_FIELDS):
        if fields.wants(name):
            batch[name] = cu_seqlens if name.startswith("cu_") else max_seqlen
    if fields.wants("segment_start"):
        batch["segment_start"] = torch.from_numpy(seqs.starts)
    if fields.wants("use_cache"):
        batch["use_cache"] = False  # see datapipe.text.fields
    batch.update({"num_real_tokens": real,
                  "num_loss_tokens": _loss_targets(seqs, labels, fields.labels, real),
                  "efficiency": real / len(seqs.ids) if len(seqs.ids) else 1.0,
                  "index": torch.from_numpy(_index(seqs))})
    if seqs.sources is not None:
        batch[SOURCE_FIELD] = torch.from_numpy(seqs.sources)
    return batch


def _blank(labels: np.ndarray, real: int | np.ndarray) -> np.ndarray:
    """-100 on every padding token."""
    if isinstance(real, int):
        labels[real:] = IGNORE
    else:
        labels[~real] = IGNORE
    return labels


def _loss_targets(seqs: _Sequences, labels: np.ndarray, style: str, real: int) -> int:
    """The labels that are not -100. Without a loss mask, counted per sequence rather than
    per token: every real token is a target but one per document sequence (shifted: the last,
    unless a split carries it on; HF: the first)."""
    if seqs.mask is not None:
        return int(np.count_nonzero(labels != IGNORE))
    documents = (seqs.lengths > 0) & ~seqs.is_filler
    if style == "hf":
        return real - int(np.count_nonzero(documents))
    return real - int(np.count_nonzero(documents & (seqs.after == IGNORE)))


def _index(seqs: _Sequences) -> np.ndarray:
    """One entry per sequence of cu_seqlens: its document, -1 for padding (the packed
    batch's tail, a fixed row's free tail)."""
    return seqs.docs.astype(np.int64, copy=False)


def _shaped(values: np.ndarray, shape: tuple[int, ...], fields: BatchFields) -> torch.Tensor:
    """Reshaped by numpy, before the tensor is made: a tensor's view costs more."""
    if fields.batch_dim:
        shape = (1, *shape)
    return torch.from_numpy(values if values.shape == shape else values.reshape(shape))


def _padded(ids: np.ndarray, lengths: np.ndarray, pieces: Gathered,
            options: CollateOptions) -> dict[str, Any]:
    rows = len(lengths)
    longest = int(lengths.max()) if rows else 0
    width = -(-longest // options.pad_to_multiple_of) * options.pad_to_multiple_of
    mask = np.arange(width)[None, :] < lengths[:, None]
    grid = np.full((rows, width), options.pad_id, dtype=np.int64)
    grid[mask] = ids
    shifted = np.full((rows, width), IGNORE, dtype=np.int64)
    shifted[mask] = shifted_labels(ids, lengths, pieces.after, pieces.mask)
    labels = shifted
    if options.fields.labels == "hf":
        labels = np.full((rows, width), IGNORE, dtype=np.int64)
        labels[mask] = hf_labels(ids, lengths, pieces.mask)
    real = int(lengths.sum())
    batch = {"input_ids": torch.from_numpy(grid), "labels": torch.from_numpy(labels),
             "attention_mask": torch.from_numpy(mask.astype(np.int64))}
    if options.fields.wants("shift_labels"):
        batch["shift_labels"] = torch.from_numpy(shifted)
    if options.fields.wants("loss_mask"):
        batch["loss_mask"] = torch.from_numpy((shifted != IGNORE).astype(np.float32))
    if options.fields.wants("use_cache"):
        batch["use_cache"] = False
    batch.update({"num_real_tokens": real,
                  "num_loss_tokens": int(np.count_nonzero(labels != IGNORE)),
                  "efficiency": real / grid.size if grid.size else 1.0,
                  "index": torch.from_numpy(pieces.docs.astype(np.int64))})
    if pieces.sources is not None:
        batch[SOURCE_FIELD] = torch.from_numpy(pieces.sources)
    return batch
