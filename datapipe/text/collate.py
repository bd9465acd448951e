"""Turn the gathered tokens of a batch into model inputs, in one of three layouts.

Labels are already shifted: ``labels[i]`` is the token after ``input_ids[i]`` in the same
document, and -100 (ignored by cross-entropy) where that next token is not in the same
sequence: at each sequence's end and on padding. A model computes
``cross_entropy(logits.view(-1, V), labels.view(-1), ignore_index=-100)`` with no further shift.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

IGNORE = -100


@dataclass(frozen=True)
class CollateOptions:
    layout: str
    pad_id: int = 0
    pad_to_multiple_of: int = 1
    seq_len: int = 0


def _shifted_labels(ids: np.ndarray, seq_lengths: np.ndarray) -> np.ndarray:
    labels = np.empty(len(ids), dtype=np.int64)
    labels[:-1] = ids[1:]
    if len(ids):
        labels[np.cumsum(seq_lengths)[seq_lengths > 0] - 1] = IGNORE
    return labels


def _positions(seq_lengths: np.ndarray) -> np.ndarray:
    total = int(seq_lengths.sum())
    starts = np.repeat(np.cumsum(seq_lengths) - seq_lengths, seq_lengths)
    return np.arange(total, dtype=np.int64) - starts


def _cu_seqlens(seq_lengths: np.ndarray) -> torch.Tensor:
    cu = np.zeros(len(seq_lengths) + 1, dtype=np.int32)
    np.cumsum(seq_lengths, out=cu[1:])
    return torch.from_numpy(cu)


def collate(tokens: np.ndarray, seg_lengths: np.ndarray, row_offsets: np.ndarray,
            options: CollateOptions) -> dict[str, Any]:
    """`tokens`: every segment's ids back to back; `row_offsets`: segments per row."""
    ids = tokens.astype(np.int64)
    if options.layout == "packed":
        return _packed(ids, seg_lengths, options)
    if options.layout == "padded":
        return _padded(ids, seg_lengths, options)
    return _fixed(ids, seg_lengths, row_offsets, options)


def _packed(ids: np.ndarray, lengths: np.ndarray, options: CollateOptions) -> dict[str, Any]:
    real = int(lengths.sum())
    extra = int(-real % options.pad_to_multiple_of)
    if extra:  # one dummy tail sequence so the total is a multiple (Tensor Cores like 8)
        ids = np.concatenate([ids, np.full(extra, options.pad_id, dtype=np.int64)])
        lengths = np.append(lengths, extra)
    labels = _shifted_labels(ids, lengths)
    if extra:
        labels[real:] = IGNORE
    return {
        "input_ids": torch.from_numpy(ids),
        "labels": torch.from_numpy(labels),
        "position_ids": torch.from_numpy(_positions(lengths)),
        "cu_seqlens": _cu_seqlens(lengths),
        "max_seqlen": int(lengths.max()) if len(lengths) else 0,
        "num_real_tokens": real,
        "efficiency": real / len(ids) if len(ids) else 1.0,
    }


def _padded(ids: np.ndarray, lengths: np.ndarray, options: CollateOptions) -> dict[str, Any]:
    rows = len(lengths)
    longest = int(lengths.max()) if rows else 0
    width = -(-longest // options.pad_to_multiple_of) * options.pad_to_multiple_of
    mask = np.arange(width)[None, :] < lengths[:, None]
    grid = np.full((rows, width), options.pad_id, dtype=np.int64)
    grid[mask] = ids
    label_grid = np.full((rows, width), IGNORE, dtype=np.int64)
    label_grid[mask] = _shifted_labels(ids, lengths)
    real = int(lengths.sum())
    return {
        "input_ids": torch.from_numpy(grid),
        "labels": torch.from_numpy(label_grid),
        "attention_mask": torch.from_numpy(mask.astype(np.int64)),
        "num_real_tokens": real,
        "efficiency": real / grid.size if grid.size else 1.0,
    }


def _fixed(ids: np.ndarray, lengths: np.ndarray, row_offsets: np.ndarray,
           options: CollateOptions) -> dict[str, Any]:
    """Rows of exactly seq_len; each row's free tail is a padding sequence of its own, so
    cu_seqlens over the flattened batch keeps attention inside documents."""
    seq_len, rows = options.seq_len, len(row_offsets) - 1
    row_fill = np.add.reduceat(lengths, row_offsets[:-1]) if len(lengths) else np.zeros(rows,
                                                                                        np.int64)
    if rows and len(lengths):
        row_fill[np.diff(row_offsets) == 0] = 0
    tails = seq_len - row_fill
    # Sequence lengths over the flattened batch: each row's segments, then its tail.
    seq_lengths = np.insert(lengths, row_offsets[1:], tails)
    is_tail = np.insert(np.zeros(len(lengths), dtype=bool), row_offsets[1:], True)
    flat = np.full(rows * seq_len, options.pad_id, dtype=np.int64)
    real_positions = np.repeat(~is_tail, seq_lengths)
    flat[real_positions] = ids
    labels = _shifted_labels(flat, seq_lengths)
    labels[~real_positions] = IGNORE
    keep = seq_lengths > 0
    real = int(lengths.sum())
    return {
        "input_ids": torch.from_numpy(flat.reshape(rows, seq_len)),
        "labels": torch.from_numpy(labels.reshape(rows, seq_len)),
        "position_ids": torch.from_numpy(_positions(seq_lengths).reshape(rows, seq_len)),
        "attention_mask": torch.from_numpy(real_positions.reshape(rows, seq_len)
                                           .astype(np.int64)),
        "cu_seqlens": _cu_seqlens(seq_lengths[keep]),
        "max_seqlen": int(seq_lengths.max()) if len(seq_lengths) else 0,
        "num_real_tokens": real,
        "efficiency": real / flat.size if flat.size else 1.0,
    }
