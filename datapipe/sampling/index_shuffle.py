"""A shuffle of 0 .. n-1 computed per position: a keyed bijection, no epoch-sized array.

`IndexShuffle(n, key)(positions)` gives the shuffled index at each position. It is a Feistel
network over the smallest even number of bits that holds n - 1, walked in cycles until it lands
inside [0, n) (cycle walking keeps a permutation of a larger power-of-two domain a permutation
of [0, n)). Six rounds of a 64-bit mixing function make it a pseudorandom permutation (the
Luby-Rackoff construction needs four); every position is reachable directly, so a plan costs
what its batch costs and a resumed position is a counter — what Grain's `index_shuffle` does,
here vectorized over a batch's positions with numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from datapipe.errors import ArgumentError

ROUNDS = 6
# Positions and indices are int64 everywhere; the domain (a power of four at least n) must fit.
MAX_SIZE = 1 << 62
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_SHIFTS = (np.uint64(30), np.uint64(27), np.uint64(31))


class IndexShuffle:
    """A pseudorandom permutation of [0, n), a pure function of (n, key)."""

    def __init__(self, n: int, key: Sequence[int]) -> None:
        if not 0 <= n <= MAX_SIZE:
            raise ArgumentError(f"{n:,} samples: a shuffle holds at most 2**62 (int64 indices)")
        self.n = n
        self.half_bits = max(1, (max(n - 1, 1).bit_length() + 1) // 2)
        self._mask = np.uint64((1 << self.half_bits) - 1)
        self._shift = np.uint64(self.half_bits)
        words = np.random.default_rng([*key, 0x1DE5]).integers(0, 1 << 63, ROUNDS,
                                                                 dtype=np.int64)
        self._keys = words.astype(np.uint64)

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """The index at each position (each in [0, n)), as int64."""
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (pos.min() < 0 or pos.max() >= self.n):
            raise IndexError(f"positions outside 0 .. {self.n - 1}")
        out = self._permute(pos.astype(np.uint64))
        outside = np.flatnonzero(out >= self.n)
        while len(outside):  # cycle walking: a few rounds at most (the domain is < 4n)
            out[outside] = self._permute(out[outside])
            outside = outside[out[outside] >= self.n]
        return out.astype(np.int64)

    @property
    def keys(self) -> np.ndarray:
        """Its round keys (ROUNDS uint64 words): what `shuffle_many` takes per position."""
        return self._keys.copy()

    def _permute(self, x: np.ndarray) -> np.ndarray:
        return _feistel(x, self._keys, self._shift, self._mask)


def round_keys(streams: np.ndarray, key: Sequence[int]) -> np.ndarray:
    """ROUNDS round keys (uint64) for each stream number, a pure function of (key, stream):
    the keys of many shuffles (`shuffle_many`) without a generator made for each."""
    words = np.random.default_rng([*key, 0x2B7E]).integers(0, 1 << 63, (2, ROUNDS),
                                                            dtype=np.int64).astype(np.uint64)
    x = np.asarray(streams, dtype=np.int64).astype(np.uint64)[:, None] ^ words[0]
    with np.errstate(over="ignore"):
        x = _mix(x)
        x ^= words[1]
        return _mix(x)


def shuffle_many(sizes: np.ndarray, keys: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The index at positions[i] of a shuffle of [0, sizes[i]) with round keys keys[i]
    (`round_keys`), as IndexShuffle computes one, for many shuffles at once: one pass of numpy
    over all the positions, where IndexShuffle costs a fixed ~0.1 ms a call (a few dozen
    positions each of a hundred small shuffles would cost a call each)."""
    n = np.asarray(sizes, dtype=np.int64)
    pos = np.asarray(positions, dtype=np.int64)
    if pos.size and ((pos < 0) | (pos >= n)).any():
        raise IndexError("positions outside their shuffles' sizes")
    distinct, which = np.unique(n, return_inverse=True)
    half = np.array([max(1, (max(int(v) - 1, 1).bit_length() + 1) // 2) for v in distinct],
                    dtype=np.uint64)[which]
    mask = (np.uint64(1) << half) - np.uint64(1)
    limit, columns = n.astype(np.uint64), np.asarray(keys, dtype=np.uint64).T
    out = _feistel(pos.astype(np.uint64), columns, half, mask)
    outside = np.flatnonzero(out >= limit)
    while len(outside):  # cycle walking, as IndexShuffle walks
        out[outside] = _feistel(out[outside], columns[:, outside], half[outside],
                                mask[outside])
        outside = outside[out[outside] >= limit[outside]]
    return out.astype(np.int64)


def _feistel(x: np.ndarray, keys: Any, shift: Any, mask: Any) -> np.ndarray:
    """The Feistel network over x (uint64, a temporary of the caller's): one round per key,
    each a word or a word per element; shift and mask, the half width, likewise."""
    left, right = x >> shift, x & mask
    with np.errstate(over="ignore"):  # the mixing multiplies wrap around, as meant
        for key in keys:
            mixed = _mix(right ^ key)
            mixed &= mask
            mixed ^= left
            left, right = right, mixed
    left <<= shift
    left |= right
    return left


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, in place on `x` (a temporary of the caller's): every input bit
    flips each output bit with probability ~1/2."""
    x ^= x >> _SHIFTS[0]
    x *= _MIX_1
    x ^= x >> _SHIFTS[1]
    x *= _MIX_2
    x ^= x >> _SHIFTS[2]
    return x
