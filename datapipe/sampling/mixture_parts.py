"""A mixture's epoch under one set of shares (a *part*): how many samples of each source each
of its batches holds, computed for any run of batches without the batches before it.

A part's whole batches are `units` groups (unit b * W + r: rank r's batch b of the part), each
holding source s floor(B * share_s) samples, and k = B - sum(floors) extra places that the
whole batches' quota gives out: extra place p goes to source searchsorted(ends, p, 'right')
(`ends`: the cumulative extras) and to group (p mod U) * inv mod U, a golden-ratio stride's
inverse (mixture_streams.spread_counts, which made the whole table at once). Group g
therefore holds extra places g * stride mod U + c * U, c < k: any run of groups costs what it
holds, and a source's count over all groups before one is a lattice count (sampling/lattice.py).
The short last step takes what the quota leaves (`short_step_sources`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from datapipe.sampling.lattice import residues_below
from datapipe.sampling.mixture_streams import _golden_stride_inverse, even_merge
from datapipe.sampling.mixture_weights import apportion


@dataclass(frozen=True)
class Part:
    """The places of an epoch under one set of shares: `units` whole batches of steps
    `first_step` on, then `tail` places of the last, short step; `quota` per source."""

    first_step: int
    units: int
    tail: int
    shares: tuple[Fraction, ...]
    quota: tuple[int, ...]


@dataclass(frozen=True)
class PartCounts:
    """Per-batch source counts of a part's whole batches, group by group."""

    units: int
    floors: np.ndarray  # per source
    ends: np.ndarray  # cumulative extra places per source
    whole: np.ndarray  # the whole batches' quota per source
    inverse: int  # group of extra place p: (p mod units) * inverse mod units
    stride: int  # its inverse: group g's first extra place is g * stride mod units

    @classmethod
    def of(cls, part: Part, batch_size: int) -> PartCounts:
        floors = np.array([math.floor(batch_size * s) for s in part.shares], dtype=np.int64)
        whole = np.asarray(whole_batches_quota(part, batch_size), dtype=np.int64)
        extra, units = whole - part.units * floors, part.units
        if units and (extra.min() < 0 or extra.max() > units
                      or extra.sum() != units * (batch_size - floors.sum())):
            raise AssertionError(f"quota {list(whole)} cannot be spread over {part}")
        inverse = _golden_stride_inverse(units) if units else 0
        stride = pow(inverse, -1, units) if units > 1 else 0
        return cls(units, floors, np.cumsum(extra), whole, inverse, stride)

    def groups(self, first: int, count: int) -> np.ndarray:
        """Counts (count x sources) of groups first .. first + count - 1."""
        sources = len(self.floors)
        per_group = int(self.ends[-1]) // self.units if self.units else 0
        g = np.arange(first, first + count, dtype=np.int64)
        places = (g * self.stride % self.units)[:, None] + \
            np.arange(per_group, dtype=np.int64)[None, :] * self.units
        source = np.searchsorted(self.ends, places, side="right")
        row = np.repeat(np.arange(count, dtype=np.int64), per_group)
        counts = np.bincount(row * sources + source.ravel(), minlength=count * sources)
        return counts.reshape(count, sources) + self.floors

    def before(self, groups: int) -> np.ndarray:
        """Samples of each source in groups 0 .. groups - 1, in O(sources x log units)."""
        if groups >= self.units:
            return self.whole.copy()
        out = groups * self.floors
        lo = 0
        for s, hi in enumerate(self.ends.tolist()):
            out[s] += self._extras_below(lo, hi, groups)
            lo = hi
        return out

    def _extras_below(self, lo: int, hi: int, groups: int) -> int:
        """Extra places lo .. hi - 1 (at most `units` of them) that went to groups below
        `groups`: residues q = p mod units run over at most two intervals."""
        if hi <= lo:
            return 0
        u, first = self.units, lo % self.units
        last = first + (hi - lo)

        def below(q: int) -> int:
            return residues_below(q, self.inverse, u, groups)

        if last <= u:
            return below(last) - below(first)
        return below(u) - below(first) + below(last - u)


def whole_batches_quota(part: Part, batch_size: int) -> list[int]:
    """The part's quota for its whole batches: their own largest-remainder share, kept within
    what each batch may hold (floor or one more) and within the part's quota (the short step
    takes the rest)."""
    units, shares = part.units, part.shares
    exact = [units * batch_size * s for s in shares]
    quota = apportion(units * batch_size, shares)
    room = [min(units * (int(batch_size * s) + 1), q) for s, q in zip(shares, part.quota,
                                                                      strict=True)]
    over = sum(max(0, q - r) for q, r in zip(quota, room, strict=True))
    quota = [min(q, r) for q, r in zip(quota, room, strict=True)]
    for i in sorted(range(len(quota)), key=lambda i: (-(exact[i] - int(exact[i])), i)):
        give = min(over, room[i] - quota[i])
        quota[i] += give
        over -= give
    if over:
        raise AssertionError(f"no room for {over} samples of part {part}")
    return quota


def tail_places(count: int, world_size: int) -> np.ndarray:
    """The places of a short last step of `count` places (from its first), rank by rank: each
    rank's batch together."""
    return np.argsort(np.arange(count) % world_size, kind="stable")


def short_step_sources(sizes: np.ndarray, shares: tuple[Fraction, ...],
                       left: np.ndarray) -> np.ndarray:
    """The sources of the last step's batches (of `sizes`, rank by rank) from what the
    epoch's quota left: each batch its floors, and its places beyond them to the sources with
    the most extra places still owed (Ryser's greedy, which finds a way for every batch to hold
    its floor or one more whenever there is one). Where the quota leaves none, the whole step
    is spread evenly instead (each batch then within two samples)."""
    floors = np.array([[int(n * s) for s in shares] for n in sizes.tolist()], dtype=np.int64)
    owed = left - floors.sum(axis=0)
    if owed.min() < 0 or owed.max() > len(sizes):
        return even_merge(left)
    counts = floors.copy()
    for rank, extra in enumerate((sizes - floors.sum(axis=1)).tolist()):
        most = np.argsort(-owed, kind="stable")[:extra]
        if extra and owed[most].min() <= 0:
            return even_merge(left)
        counts[rank, most] += 1
        owed[most] -= 1
    return np.repeat(np.tile(np.arange(len(shares)), len(sizes)), counts.ravel())
