"""Which samples a rank sees in an epoch, in which batches: a pure function of its inputs.

Because the order depends only on (seed, epoch, rank, world size), resuming needs nothing but
the number of batches already consumed (and, after a resume at another world size, the
segments before it: see sampling/elastic.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.sampling.elastic import drawn_prefix


def epoch_permutation(num_samples: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """A global shuffle of all sample indices, the same on every rank."""
    if not shuffle:
        return np.arange(num_samples, dtype=np.int64)
    rng = np.random.default_rng([seed, epoch, 0x5EED])
    return rng.permutation(num_samples).astype(np.int64)


def rank_share(order: np.ndarray, rank: int, world_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank `rank`'s strided share of `order`, and which of its entries are padding.

    Every rank gets ceil(n / world_size) samples so that all ranks run the same number of steps
    (uneven shares are what hang distributed training). The shortfall is filled by repeating
    samples from the start of the order, flagged as padding: the non-padding samples of all ranks
    together are the dataset exactly once.
    """
    if not 0 <= rank < world_size:
        raise ArgumentError(f"rank {rank} is outside world_size {world_size}")
    n = len(order)
    per_rank = -(-n // world_size) if n else 0
    total = per_rank * world_size
    padded = np.concatenate([order, np.resize(order, total - n)]) if total > n else order
    is_pad = np.zeros(total, dtype=bool)
    is_pad[n:] = True
    return padded[rank::world_size], is_pad[rank::world_size]


@dataclass(frozen=True)
class EpochPlan:
    """The batches one rank draws in one epoch."""

    indices: np.ndarray
    is_pad: np.ndarray
    batch_size: int
    drop_last: bool
    group_reads: bool = True

    @classmethod
    def build(cls, num_samples: int, *, seed: int, epoch: int, shuffle: bool, rank: int,
              world_size: int, batch_size: int, drop_last: bool) -> EpochPlan:
        order = epoch_permutation(num_samples, seed, epoch, shuffle)
        return SampleRemainder(order, batch_size, drop_last, shuffle).rank_plan(rank, world_size)

    def __len__(self) -> int:
        if self.drop_last:
            return len(self.indices) // self.batch_size
        return -(-len(self.indices) // self.batch_size)

    def has(self, b: int) -> bool:
        return 0 <= b < len(self)

    def is_last(self, b: int) -> bool:
        return b == len(self) - 1

    def extra(self, b: int) -> None:
        return None

    def batch(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Indices of batch `b` and their padding flags.

        Within a shuffled batch the indices are sorted: the batch is still a uniform random draw,
        but its reads walk each shard front to back, which is what the page cache likes.
        """
        if not 0 <= b < len(self):
            raise IndexError(f"batch {b} of {len(self)}")
        lo = b * self.batch_size
        idx = self.indices[lo:lo + self.batch_size]
        pad = self.is_pad[lo:lo + self.batch_size]
        if self.group_reads:
            order = np.argsort(idx, kind="stable")
            idx, pad = idx[order], pad[order]
        return idx, pad


@dataclass(frozen=True)
class SampleRemainder:
    """The samples of an epoch not drawn yet, in epoch order, and how ranks batch them."""

    order: np.ndarray
    batch_size: int
    drop_last: bool
    group_reads: bool = True

    def batches_per_rank(self, world_size: int) -> int:
        share = -(-len(self.order) // world_size)
        return share // self.batch_size if self.drop_last else -(-share // self.batch_size)

    def has_batches(self, world_size: int, count: int) -> bool:
        return count <= self.batches_per_rank(world_size)

    def after(self, world_size: int, batches_done: int) -> SampleRemainder:
        drawn = drawn_prefix(len(self.order), world_size, batches_done, self.batch_size)
        return replace(self, order=self.order[drawn:])

    def rank_plan(self, rank: int, world_size: int) -> EpochPlan:
        indices, is_pad = rank_share(self.order, rank, world_size)
        return EpochPlan(indices, is_pad, self.batch_size, self.drop_last, self.group_reads)
