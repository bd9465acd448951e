"""Consecutive groups of a sequence (rows of segments, batches of rows) as whole arrays.

An epoch at a small token budget has millions of batches, so planners work on offsets and
index arrays with numpy and never take a Python step per group.
"""

from __future__ import annotations

import numpy as np


def offsets(counts: np.ndarray) -> np.ndarray:
    """Where each group of `counts` begins, and where the last ends: [0, c0, c0 + c1, ...]."""
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """starts[i], starts[i] + 1, ..., starts[i] + counts[i] - 1 for every i, back to back."""
    counts = np.asarray(counts, dtype=np.int64)
    firsts = offsets(counts)
    shift = np.asarray(starts, dtype=np.int64) - firsts[:-1]
    return np.arange(firsts[-1], dtype=np.int64) + np.repeat(shift, counts)

