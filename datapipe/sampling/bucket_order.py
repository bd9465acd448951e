"""An epoch of aspect-ratio bucketed batches: each batch one bucket's, a pure function of
(seed, epoch, rank, world size).

Bucket k holds n_k images (the bucket index: `ids[offsets[k]:offsets[k + 1]]`) and makes
c_k = ceil(n_k / B_k) batches of B_k (floor with drop_last). Its images are in a keyed shuffle
of their own (`KeyedOrder` keyed by the bucket), and its batch j takes places j*B_k ..
(j+1)*B_k - 1 of it; places past n_k repeat the bucket's beginning, flagged `is_padding`, so
every batch of a bucket has B_k images. The epoch's global batch sequence merges the buckets'
batches evenly (sampling/interleave.py), the buckets taken in a keyed order drawn per epoch: a
small bucket's batches are spread through the epoch, not all at its end, and differently each
epoch. Any global batch is found without the ones before it, and how many images each bucket
gave before any batch is a formula (`interleave.prefix`).

Ranks draw the global sequence round robin (rank r's b-th batch is global batch drawn + b*W +
r) and every rank runs the same steps: a rank past the end draws a repeat of what was left,
every image flagged `is_padding`. A resume at another world size continues the same global
sequence from what was drawn (sampling/elastic.py), so nothing here depends on the world size
but who draws which batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.sampling.interleave import interleave, prefix
from datapipe.sampling.order import CHUNK_SAMPLES, KeyedOrder

_BUCKET_ORDER_KEY = 0xB0C4


@dataclass(frozen=True, eq=False)
class BucketLayout:
    """What every epoch of a bucketed loader is made of."""

    ids: np.ndarray  # every sample id, bucket by bucket (the bucket index, memory-mapped)
    offsets: tuple[int, ...]  # bucket k's ids are ids[offsets[k]:offsets[k + 1]]
    batch_sizes: tuple[int, ...]
    drop_last: bool
    seed: int
    shuffle: bool

    def __post_init__(self) -> None:
        if len(self.offsets) != len(self.batch_sizes) + 1 or min(self.batch_sizes) < 1:
            raise ArgumentError(f"a bucket layout needs one batch size >= 1 per bucket, got "
                                f"{self.batch_sizes} for {len(self.offsets) - 1} buckets")

    @property
    def counts(self) -> tuple[int, ...]:
        """Images in each bucket."""
        return tuple(b - a for a, b in zip(self.offsets, self.offsets[1:], strict=False))

    @property
    def batches(self) -> tuple[int, ...]:
        """Batches each bucket makes in an epoch."""
        if self.drop_last:
            return tuple(n // b for n, b in zip(self.counts, self.batch_sizes, strict=True))
        return tuple(-(-n // b) for n, b in zip(self.counts, self.batch_sizes, strict=True))

    def images(self, batches: list[int] | tuple[int, ...]) -> int:
        """Distinct images in the first `batches[k]` batches of each bucket k."""
        return sum(min(n, c * b) for n, c, b in zip(self.counts, batches, self.batch_sizes,
                                                    strict=True))


class BucketBatches(Protocol):
    """An epoch's global sequence of bucketed batches: one dataset's (BucketEpoch) or a
    mixture's (sampling/bucket_mixture.py)."""

    total: int
    batch_sizes: tuple[int, ...]

    def lookup(self, places: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """(bucket, ids, padding flags) of each global batch at `places`."""
        ...


class BucketEpoch:
    """Epoch `epoch`'s global sequence of bucketed batches."""

    def __init__(self, layout: BucketLayout, epoch: int) -> None:
        self.layout, self.epoch = layout, epoch
        self.batch_sizes = layout.batch_sizes
        made = layout.batches
        present = np.array([k for k, c in enumerate(made) if c], dtype=np.int64)
        if layout.shuffle:
            rng = np.random.default_rng([layout.seed, epoch, _BUCKET_ORDER_KEY])
            present = present[rng.permutation(len(present))]
        self.buckets = present  # the merge's sources, in this epoch's order
        self.counts = tuple(made[k] for k in present.tolist())
        self.total = sum(self.counts)
        self._orders: dict[int, KeyedOrder] = {}

    def _order(self, k: int) -> KeyedOrder:
        order = self._orders.get(k)
        if order is None:
            order = self._orders[k] = KeyedOrder(self.layout.counts[k], self.layout.seed,
                                                 self.epoch, self.layout.shuffle, (k,))
        return order

    def lookup(self, places: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """(bucket, ids, padding flags) of each global batch at `places` (each < total): one
        keyed lookup per bucket among them. A batch's ids are sorted (its reads walk each
        shard front to back), a repeated id's real sample before its padding."""
        source, within = interleave(self.counts, np.asarray(places, dtype=np.int64))
        buckets = self.buckets[source]
        found: list[tuple[int, np.ndarray, np.ndarray]] = [None] * len(places)  # type: ignore
        layout = self.layout
        for k in np.unique(buckets).tolist():
            rows = np.flatnonzero(buckets == k)
            size, n = layout.batch_sizes[k], layout.counts[k]
            at = (within[rows, None] * size + np.arange(size)).ravel()
            ids = layout.ids[layout.offsets[k] + self._order(k).at(at % n)].astype(np.int64)
            keys = (ids * 2 + (at >= n)).reshape(len(rows), size)
            keys.sort(axis=1)
            for row, key in zip(rows.tolist(), keys, strict=True):
                found[row] = (k, key >> 1, (key & 1).astype(bool))
        return found

    def images_before(self, place: int) -> int:
        """Distinct images in the first `place` global batches, by formula."""
        done = prefix(self.counts, min(place, self.total))
        batches = [0] * len(self.layout.counts)
        for k, count in zip(self.buckets.tolist(), done, strict=True):
            batches[k] = count
        return self.layout.images(batches)


@dataclass(frozen=True)
class BucketStream:
    """What is left of an epoch of bucketed batches: its global sequence from `drawn` on."""

    epoch: BucketBatches
    drawn: int = 0

    def batches_per_rank(self, world_size: int) -> int:
        return -(-(self.epoch.total - self.drawn) // world_size)

    def has_batches(self, world_size: int, count: int) -> bool:
        return count <= self.batches_per_rank(world_size)

    def after(self, world_size: int, batches_done: int) -> BucketStream:
        return replace(self, drawn=min(self.epoch.total, self.drawn + batches_done * world_size))

    def rank_plan(self, rank: int, world_size: int) -> RankBuckets:
        if not 0 <= rank < world_size:
            raise ArgumentError(f"rank {rank} is outside world_size {world_size}")
        return RankBuckets(self.epoch, self.drawn, rank, world_size)


@dataclass(frozen=True, eq=False)
class RankBuckets:
    """Rank `rank`'s batches of a BucketStream: its b-th is global batch drawn + b*W + rank,
    or past the end a padding repeat of what was left. Looked up a run of batches at a time
    (one keyed lookup per bucket in the run), so a batch costs the training thread little."""

    epoch: BucketBatches
    drawn: int
    rank: int
    world_size: int
    _chunk: tuple[int, list[tuple[int, np.ndarray, np.ndarray]]] | None = field(
        default=None, init=False, repr=False)

    def __len__(self) -> int:
        return -(-(self.epoch.total - self.drawn) // self.world_size)

    def has(self, b: int) -> bool:
        return 0 <= b < len(self)

    def is_last(self, b: int) -> bool:
        return b == len(self) - 1

    def global_batch(self, b: int) -> int:
        return self.drawn + b * self.world_size + self.rank

    def padding(self, b: int) -> bool:
        return self.global_batch(b) >= self.epoch.total

    def batch(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        _, ids, is_pad = self._looked_up(b)
        return ids, is_pad | self.padding(b)

    def extra(self, b: int) -> dict[str, int]:
        """The batch's bucket, and the global batch its crops are drawn for (the same at any
        world size)."""
        return {"bucket": self._looked_up(b)[0], "global": self.global_batch(b)}

    def _looked_up(self, b: int) -> tuple[int, np.ndarray, np.ndarray]:
        if not self.has(b):
            raise IndexError(f"batch {b} of {len(self)}")
        sizes = self.epoch.batch_sizes
        per_chunk = max(1, min(1024, CHUNK_SAMPLES * len(sizes) // sum(sizes)))
        first = b - b % per_chunk
        chunk = self._chunk
        if chunk is None or chunk[0] != first:
            steps = np.arange(first, min(first + per_chunk, len(self)), dtype=np.int64)
            places = self.drawn + steps * self.world_size + self.rank
            left = self.epoch.total - self.drawn
            places = np.where(places < self.epoch.total, places,
                              self.drawn + (places - self.drawn) % left)
            chunk = (first, self.epoch.lookup(places))
            object.__setattr__(self, "_chunk", chunk)  # a cache: swapped whole
        return chunk[1][b - first]
