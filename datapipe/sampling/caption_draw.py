"""Which caption of a sample an epoch reads: a pure function of (seed, epoch, sample index).

A sample with several captions (COCO's five) shows one per epoch. The choice is a keyed hash of
the sample's index, not a draw from a generator that runs through the epoch: it does not depend
on the order, the batch, the worker or the rank, so a resumed run and an uninterrupted one read
the same caption, and over epochs each caption is read equally often.
"""

from __future__ import annotations

import numpy as np

_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_SHIFTS = (np.uint64(30), np.uint64(27), np.uint64(31))
_DRAW = 0xCA97


def caption_choice(seed: int, epoch: int, indices: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """For each sample id in `indices`, a caption number in [0, its count) (int64); a count of
    zero or one gives 0."""
    key = np.random.default_rng([seed, epoch, _DRAW]).integers(0, 1 << 63, dtype=np.int64)
    x = np.asarray(indices, dtype=np.int64).astype(np.uint64) ^ np.uint64(key)
    with np.errstate(over="ignore"):  # splitmix64's finalizer: the multiplies wrap, as meant
        x ^= x >> _SHIFTS[0]
        x *= _MIX_1
        x ^= x >> _SHIFTS[1]
        x *= _MIX_2
        x ^= x >> _SHIFTS[2]
    counts = np.maximum(np.asarray(counts, dtype=np.int64), 1).astype(np.uint64)
    return (x % counts).astype(np.int64)
