"""One VLM sample as the language model reads it: the stored ids with each image placeholder
expanded to the image's tokens, the labels, and Qwen2-VL's multimodal RoPE positions.

Positions are computed as transformers' `Qwen2VLModel.get_rope_index` does for one sequence:
text tokens count on by one on all three axes; an image's tokens take (t, h, w) = (start,
start + row, start + column) over its merged grid, and the text after it starts at start +
max(rows, columns). Each sample starts at 0, so a packed batch restarts them per sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from datapipe.text.labels import IGNORE


@dataclass
class Sequence:
    input_ids: np.ndarray  # (T,) int64
    labels: np.ndarray  # (T,) int64, unshifted: -100 where the loss does not count
    rope: np.ndarray  # (3, T) int64
    is_image: np.ndarray  # (T,) bool


def expand_sample(ids: np.ndarray, mask: np.ndarray | None, placeholders: np.ndarray,
                  grids: np.ndarray, merge: int) -> Sequence:
    """`grids`: (n, 2) patch rows and columns of each image, in placeholder order."""
    ids = ids.astype(np.int64)
    merged = grids // merge
    tokens = merged[:, 0] * merged[:, 1]
    counts = np.ones(len(ids), np.int64)
    counts[placeholders] = tokens
    targets = ids if mask is None else np.where(mask.astype(bool), ids, IGNORE)
    image = np.zeros(len(ids), bool)
    image[placeholders] = True
    labels = np.repeat(targets, counts)
    is_image = np.repeat(image, counts)
    labels[is_image] = IGNORE
    if len(labels):
        labels[0] = IGNORE  # nothing before a sample predicts its first token
    return Sequence(np.repeat(ids, counts), labels, _rope(len(ids), placeholders, merged),
                    is_image)


def _rope(stored: int, placeholders: np.ndarray, merged: np.ndarray) -> np.ndarray:
    """(3, T) positions of a sample of `stored` ids whose placeholders expand to the merged
    grids."""
    total = stored - len(placeholders) + int((merged[:, 0] * merged[:, 1]).sum())
    rope = np.empty((3, total), np.int64)
    at = current = previous = 0
    for p, (rows, cols) in zip(placeholders.tolist(), merged.tolist(), strict=True):
        run = p - previous
        rope[:, at:at + run] = current + np.arange(run)
        at, current = at + run, current + run
        n = rows * cols
        rope[0, at:at + n] = current
        rope[1, at:at + n] = current + np.repeat(np.arange(rows), cols)
        rope[2, at:at + n] = current + np.tile(np.arange(cols), rows)
        at, current, previous = at + n, current + max(rows, cols), p + 1
    rope[:, at:] = current + np.arange(total - at)
    return rope
