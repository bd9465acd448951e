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

    def _permute(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._shift, x & self._mask
        with np.errstate(over="ignore"):  # the mixing multiplies wrap around, as meant
            for key in self._keys:
                mixed = _mix(right ^ key)
                mixed &= self._mask
                mixed ^= left
                left, right = right, mixed
        left <<= self._shift
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
