"""Targets of a flat run of sequences, in both conventions, with a loss mask applied.

The *shifted* convention (datapipe's `labels`, HF's `shift_labels`, Megatron's `labels`):
``labels[i]`` is the token the model should predict after ``input_ids[i]``, -100 where none
counts; cross-entropy takes it as it is. HF's convention (`labels` for a transformers model):
``labels[i]`` is ``input_ids[i]`` itself, -100 at each sequence's first token (its model
shifts by one inside the row). Every array here is over the flattened batch, sequence after
sequence, vectorised: no Python loop per document.
"""

from __future__ import annotations

import numpy as np

IGNORE = -100


def sequence_ends(lengths: np.ndarray) -> np.ndarray:
    """The last position of each non-empty sequence."""
    return np.cumsum(lengths)[lengths > 0] - 1


def sequence_starts(lengths: np.ndarray) -> np.ndarray:
    """The first position of each non-empty sequence."""
    return (np.cumsum(lengths) - lengths)[lengths > 0]


def shifted_labels(ids: np.ndarray, lengths: np.ndarray, after: np.ndarray | None = None,
                   mask: np.ndarray | None = None) -> np.ndarray:
    """`after[s]`: the target of sequence s's last token (the next token of a document split
    there, else -100), None: -100 everywhere. `mask[i]` 0: token i is no target (SFT)."""
    labels = np.empty(len(ids), dtype=np.int64)
    labels[:-1] = ids[1:]
    if mask is not None and len(ids):
        labels[:-1][mask[1:] == 0] = IGNORE
    if len(ids):
        ends = sequence_ends(lengths)
        carried = after is not None and (after != IGNORE).any()  # only where a split is
        labels[ends] = after[lengths > 0] if carried else IGNORE
    return labels


def hf_labels(ids: np.ndarray, lengths: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Unshifted labels as transformers' DataCollatorWithFlattening makes them."""
    labels = ids.copy()
    if mask is not None:
        labels[mask == 0] = IGNORE
    labels[sequence_starts(lengths)] = IGNORE
    return labels


def positions(lengths: np.ndarray, starts: np.ndarray | None = None) -> np.ndarray:
    """0, 1, ... in each sequence; from `starts[s]` instead of 0 where given (a piece of a
    split document continuing its positions)."""
    total = int(lengths.sum())
    first = np.cumsum(lengths) - lengths
    offset = first if starts is None else first - starts
    return np.arange(total, dtype=np.int64) - np.repeat(offset, lengths)


def sequence_ids(lengths: np.ndarray) -> np.ndarray:
    """seq_idx: the number of the sequence each token belongs to (int32)."""
    return np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
