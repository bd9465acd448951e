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


def follow_cuts(group_end: np.ndarray) -> np.ndarray:
    """The cuts of a greedy pass over n items: 0, e[0], e[e[0]], ... up to n, where
    `group_end[i]` (above i, at most n) is where a group that begins at item i ends.

    Each step depends on the one before, so the chain is followed by pointer doubling: every
    round applies the jump of 2**k groups to all cuts known so far (doubling them) and squares
    the jump, in O(n log groups) numpy work.
    """
    n = len(group_end)
    jump = np.append(np.asarray(group_end, dtype=np.int64), n)  # the end stays the end
    cuts = np.zeros(1, dtype=np.int64)
    while cuts[-1] < n:
        cuts = np.concatenate([cuts, jump[cuts]])  # cuts 2**k .. 2**(k+1) - 1
        jump = jump[jump]
    return cuts[:int(np.searchsorted(cuts, n)) + 1]
