"""Which samples a rank sees in an epoch, in which batches: a pure function of its inputs.

Because the order depends only on (seed, epoch, rank, world size), resuming needs nothing but
the number of batches already consumed (and, after a resume at another world size, the
segments before it: see sampling/elastic.py).

An epoch's order is a function from a place (0 .. n-1) to a sample id, asked for the places a
batch needs (`EpochOrder.at`). One dataset's order is a keyed permutation computed per place
(`KeyedOrder`, sampling/index_shuffle.py): no epoch-sized array exists, so a plan costs the
same at 10^3 samples as at 10^9, on any rank of any world size, and a resumed plan is an
offset into the same function. A mixture's order is computed a window of whole steps at a
time (sampling/mixture_windows.py), so it too costs what a window holds, at any size.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.sampling.elastic import drawn_prefix
from datapipe.sampling.index_shuffle import IndexShuffle

# Samples a plan looks up at once: IndexShuffle costs a fixed ~0.2-0.3 ms a call plus well
# under 0.1 us a sample, so one call serves many batches; its temporaries stay well under 1 MB.
CHUNK_SAMPLES = 8192


class EpochOrder(Protocol):
    """An epoch's global order: the sample id at each place 0 .. len-1."""

    def __len__(self) -> int: ...

    def at(self, places: np.ndarray) -> np.ndarray:
        """The sample ids (int64) at `places`."""
        ...


@dataclass(frozen=True, eq=False)
class ArrayOrder:
    """An order held as an array of sample ids (a small order made whole, as tests do)."""

    ids: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def at(self, places: np.ndarray) -> np.ndarray:
        return self.ids[places]


class KeyedOrder:
    """All `n` sample ids, shuffled by (seed, epoch) one place at a time, or in id order.
    `stream` keys one of several independent orders of the same epoch (a bucket's)."""

    def __init__(self, n: int, seed: int, epoch: int, shuffle: bool,
                 stream: tuple[int, ...] = ()) -> None:
        self.n = n
        self._shuffle = IndexShuffle(n, [seed, epoch, 0x5EED, *stream]) if shuffle else None

    def __len__(self) -> int:
        return self.n

    def at(self, places: np.ndarray) -> np.ndarray:
        places = np.asarray(places, dtype=np.int64)
        return places if self._shuffle is None else self._shuffle(places)


@dataclass(frozen=True)
class _Chunk:
    """The ids and padding flags of a run of a plan's batches, the last ones looked up."""

    first: int  # batch number of the first
    ids: np.ndarray
    is_pad: np.ndarray


@dataclass(frozen=True, eq=False)
class EpochPlan:
    """The batches rank `rank` of `world_size` draws from places `start` .. `start + count - 1`
    of an epoch's order.

    Ranks stride the places: the rank's j-th sample is place q = j * world_size + rank of
    them. Every rank gets ceil(count / world_size) samples so that all ranks run the same
    number of steps (uneven shares are what hang distributed training); a q past the end
    repeats place q mod count, the beginning again, flagged as padding. The non-padding
    samples of all ranks together are the places exactly once.
    """

    order: EpochOrder
    start: int
    count: int
    rank: int
    world_size: int
    batch_size: int
    drop_last: bool
    group_reads: bool = True
    _last: _Chunk | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise ArgumentError(f"rank {self.rank} is outside world_size {self.world_size}")

    @classmethod
    def build(cls, num_samples: int, *, seed: int, epoch: int, shuffle: bool, rank: int,
              world_size: int, batch_size: int, drop_last: bool) -> EpochPlan:
        order = KeyedOrder(num_samples, seed, epoch, shuffle)
        return SampleRemainder(order, batch_size, drop_last, shuffle).rank_plan(rank, world_size)

    @property
    def share(self) -> int:
        """Samples this rank draws, padding included: the same on every rank."""
        return -(-self.count // self.world_size)

    def __len__(self) -> int:
        if self.drop_last:
            return self.share // self.batch_size
        return -(-self.share // self.batch_size)

    def has(self, b: int) -> bool:
        return 0 <= b < len(self)

    def is_last(self, b: int) -> bool:
        return b == len(self) - 1

    def extra(self, b: int) -> None:
        return None

    def batch(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Sample ids of batch `b` and their padding flags.

        Within a shuffled batch the ids are sorted: the batch is still a uniform random draw,
        but its reads walk each shard front to back, which is what the page cache likes.
        """
        if not self.has(b):
            raise IndexError(f"batch {b} of {len(self)}")
        chunk = self._chunk_of(b)
        lo = (b - chunk.first) * self.batch_size
        return chunk.ids[lo:lo + self.batch_size], chunk.is_pad[lo:lo + self.batch_size]

    def _chunk_of(self, b: int) -> _Chunk:
        """The looked-up run of batches holding `b`, kept for the batches after it. (Swapped
        whole, in one store: a thread that asks meanwhile sees the old run or the new one.)"""
        per_chunk = max(1, CHUNK_SAMPLES // self.batch_size)
        first = b - b % per_chunk
        last = self._last
        if last is not None and last.first == first:
            return last
        j = np.arange(first * self.batch_size,
                      min((first + per_chunk) * self.batch_size, self.share), dtype=np.int64)
        q = j * self.world_size + self.rank
        ids, is_pad = self.order.at(self.start + q % self.count), q >= self.count
        if self.group_reads:
            ids, is_pad = _sort_each_batch(ids, is_pad, self.batch_size)
        chunk = _Chunk(first, ids, is_pad)
        object.__setattr__(self, "_last", chunk)  # a cache: the plan itself stays as built
        return chunk


def _sort_each_batch(ids: np.ndarray, is_pad: np.ndarray,
                     batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Each run of `batch_size` ids (the last may be shorter) sorted, its flags alongside: one
    sort of (id, flag) pairs packed as id * 2 + flag (ids stay below 2**62) for a chunk's whole
    batches. A repeated id puts its real sample before its padding, as a stable sort did."""
    keys = ids * 2 + is_pad
    whole = len(keys) // batch_size * batch_size
    keys[:whole].reshape(-1, batch_size).sort(axis=1)
    keys[whole:].sort()
    return keys >> 1, (keys & 1).astype(bool)


@dataclass(frozen=True)
class SampleRemainder:
    """The places of an epoch's order not drawn yet (`start` on), and how ranks batch them."""

    order: EpochOrder
    batch_size: int
    drop_last: bool
    group_reads: bool = True
    start: int = 0

    def __len__(self) -> int:
        return len(self.order) - self.start

    def batches_per_rank(self, world_size: int) -> int:
        share = -(-len(self) // world_size)
        return share // self.batch_size if self.drop_last else -(-share // self.batch_size)

    def has_batches(self, world_size: int, count: int) -> bool:
        return count <= self.batches_per_rank(world_size)

    def after(self, world_size: int, batches_done: int) -> SampleRemainder:
        drawn = drawn_prefix(len(self), world_size, batches_done, self.batch_size)
        return replace(self, start=self.start + drawn)

    def rank_plan(self, rank: int, world_size: int) -> EpochPlan:
        return EpochPlan(self.order, self.start, len(self), rank, world_size, self.batch_size,
                         self.drop_last, self.group_reads)
