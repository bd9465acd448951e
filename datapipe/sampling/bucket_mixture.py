"""A mixture of datasets batched by aspect-ratio buckets: each batch one bucket's images, each
source giving its weight's share of the epoch, a pure function of (seed, epoch, rank, world
size, weights, sizes).

How much of each source an epoch takes is the unbucketed mixture's rule (sampling/mixture.py):
epoch_size samples split by the weights, by phases placed at steps of batch_size samples, each
source's quota taken where the epochs before stopped in an endless stream of *slots*. Slot t of
source s goes to bucket k by an even merge of its buckets by their sizes n_sk (cycle after cycle
of n_s slots: sampling/interleave.py), so any run of slots holds each bucket close to its
share (one rounding per halving of the buckets, at either end) and a whole cycle holds every
image of the source once. How many of bucket k's images a run of slots holds is a formula
(`bucket_entries`); bucket k of source s is itself an endless stream of keyed shuffles of its
n_sk images, a new one per pass over them (`BucketMixture.stream_ids`).

Each part of the epoch (one per phase over it) then holds Q_sk images of source s in bucket k.
Bucket k's M_k = sum_s Q_sk places merge its sources evenly (each batch of the bucket holds
each source near its share of the bucket), and are cut into batches of B_k, the last one filled
with repeats of the bucket's beginning flagged `is_padding` (dropped with drop_last). The
buckets' batches are merged evenly, the buckets in a keyed order per epoch and part, as for one
dataset (sampling/bucket_order.py): ranks draw the global sequence round robin, a resume at
another world size continues it, and every lookup costs what the batches asked hold. Nothing the
size of a source is made: per part a sources x buckets table of counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.sampling.bucket_order import BucketStream, RankBuckets
from datapipe.sampling.index_shuffle import round_keys, shuffle_many
from datapipe.sampling.interleave import interleave, prefix
from datapipe.sampling.mixture import Mixture

_BUCKET_ORDER_KEY = 0xB0C5
_STREAM_KEY = 0x5B0C


def bucket_entries(counts: np.ndarray, slots: int) -> np.ndarray:
    """Entries of each bucket among a source's first `slots` slots (`counts`: its images in
    each bucket): whole cycles, then the even merge's prefix."""
    cycles, into = divmod(slots, int(counts.sum()))
    return cycles * counts + np.asarray(prefix(counts.tolist(), into), dtype=np.int64)


@dataclass(frozen=True, eq=False)
class BucketMixture:
    """A Mixture whose sources are bucketed: `ids[s]` is source s's bucket index (its local ids
    bucket by bucket) and `counts[s][k]` its images in bucket k. The Mixture's batch_size
    places its phases (a step is batch_size x world_size samples); `batch_sizes` cut the
    buckets."""

    mixture: Mixture
    ids: tuple[np.ndarray, ...]
    counts: tuple[tuple[int, ...], ...]
    batch_sizes: tuple[int, ...]
    drop_last: bool

    def __post_init__(self) -> None:
        m = self.mixture
        if len(self.ids) != len(m.sizes) or len(self.counts) != len(m.sizes):
            raise ArgumentError(f"a bucketed mixture needs a bucket index per source, got "
                                f"{len(self.ids)} for {len(m.sizes)} sources")
        for s, (ids, counts) in enumerate(zip(self.ids, self.counts, strict=True)):
            if len(counts) != len(self.batch_sizes) or not sum(counts) == len(ids) == m.sizes[s]:
                raise ArgumentError(f"source {s}'s bucket index holds {len(ids)} ids in "
                                    f"{list(counts)} for {len(self.batch_sizes)} buckets and "
                                    f"{m.sizes[s]} samples")
        if min(self.batch_sizes) < 1:
            raise ArgumentError(f"bucket batch sizes must be >= 1, got {self.batch_sizes}")

    @cached_property
    def table(self) -> np.ndarray:
        """Images per source (rows) and bucket (columns)."""
        return np.asarray(self.counts, dtype=np.int64).reshape(len(self.counts), -1)

    @cached_property
    def bucket_offsets(self) -> np.ndarray:
        """Where bucket k's ids start in source s's index (sources x buckets)."""
        return np.cumsum(self.table, axis=1) - self.table

    def epoch(self, epoch: int, world_size: int) -> BucketMixEpoch:
        return BucketMixEpoch(self, epoch, world_size)

    def start(self, epoch: int) -> BucketMixStart:
        """The epoch before any batch (a loader's `_epoch_start`)."""
        return BucketMixStart(self, epoch)

    def stream_ids(self, source: np.ndarray, bucket: np.ndarray,
                   entries: np.ndarray) -> np.ndarray:
        """Combined ids at `entries` of each place's bucket stream (source[i], bucket[i]): pass
        c over a bucket's images is a keyed shuffle by (seed, source, bucket, c), all the
        places' looked up at once (shuffle_many)."""
        n = self.table[source, bucket]
        passes, within = np.divmod(entries, n)
        if self.mixture.shuffle:
            sources, buckets = self.table.shape
            streams = (passes * sources + source) * buckets + bucket
            within = shuffle_many(n, round_keys(streams, (self.mixture.seed, _STREAM_KEY)),
                                  within)
        local = np.empty(len(entries), dtype=np.int64)
        for s in np.unique(source).tolist():
            chosen = source == s
            local[chosen] = self.ids[s][self.bucket_offsets[s, bucket[chosen]]
                                        + within[chosen]]
        return self.mixture.offsets[source] + local


@dataclass(frozen=True, eq=False)
class _Part:
    """The batches of one phase's part of an epoch: Q (sources x buckets) images, the
    bucket streams' entries at its start, the batches each bucket makes and their order."""

    quota: np.ndarray
    starts: np.ndarray
    batches: np.ndarray  # per bucket
    order: np.ndarray  # the present buckets, in this part's keyed order

    @property
    def places(self) -> np.ndarray:
        return self.quota.sum(axis=0)

    @property
    def total(self) -> int:
        return int(self.batches.sum())

    def images_in(self, batches: np.ndarray, batch_sizes: np.ndarray) -> np.ndarray:
        """Images of each source in the first `batches[k]` batches of each bucket k (padding,
        a repeat, not counted)."""
        drawn = np.zeros(len(self.quota), dtype=np.int64)
        for k in np.flatnonzero(batches).tolist():
            places = min(int(self.places[k]), int(batches[k] * batch_sizes[k]))
            drawn += np.asarray(prefix(self.quota[:, k].tolist(), places), dtype=np.int64)
        return drawn


class BucketMixEpoch:
    """Epoch `epoch`'s global sequence of bucketed batches at `world_size` (which places the
    phases; without phases the sequence is the same at any world size)."""

    def __init__(self, mix: BucketMixture, epoch: int, world_size: int) -> None:
        self.mix, self.epoch = mix, epoch
        self.batch_sizes = mix.batch_sizes
        self._sizes = np.asarray(mix.batch_sizes, dtype=np.int64)
        self.before = mix.mixture.drawn_before(epoch, world_size)  # slots, per source
        slots = self.before.copy()
        self.parts: list[_Part] = []
        for p, part in enumerate(mix.mixture.parts(epoch, world_size)):
            quota = np.asarray(part.quota, dtype=np.int64)
            self.parts.append(self._part(p, slots, quota))
            slots += quota
        self.ends = np.cumsum([part.total for part in self.parts], dtype=np.int64)
        self.total = int(self.ends[-1]) if len(self.ends) else 0

    def _part(self, p: int, slots: np.ndarray, quota: np.ndarray) -> _Part:
        table = self.mix.table
        starts = np.stack([bucket_entries(table[s], int(slots[s])) for s in range(len(table))])
        ends = np.stack([bucket_entries(table[s], int(slots[s] + quota[s]))
                         for s in range(len(table))])
        places = (ends - starts).sum(axis=0)
        batches = places // self._sizes if self.mix.drop_last else -(-places // self._sizes)
        present = np.flatnonzero(batches)
        if self.mix.mixture.shuffle:
            rng = np.random.default_rng([self.mix.mixture.seed, self.epoch, p,
                                         _BUCKET_ORDER_KEY])
            present = present[rng.permutation(len(present))]
        return _Part(ends - starts, starts, batches, present)

    def lookup(self, places: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """(bucket, combined ids, padding flags) of each global batch at `places` (each <
        total), as BucketEpoch.lookup gives them: a batch's ids sorted, a repeated id's real
        sample before its padding. The batches' places are laid out bucket by bucket, then
        all their ids looked up at once."""
        places = np.asarray(places, dtype=np.int64)
        runs: list[tuple[np.ndarray, int]] = []  # (rows of `places`, their bucket), in order
        columns: list[tuple[np.ndarray, ...]] = []  # (source, bucket, entry, padding) per run
        which = np.searchsorted(self.ends, places, side="right")
        for p in np.unique(which).tolist():
            rows = np.flatnonzero(which == p)
            part = self.parts[p]
            local = places[rows] - (self.ends[p] - part.total)
            source, within = interleave(part.batches[part.order].tolist(), local)
            buckets = part.order[source]
            for k in np.unique(buckets).tolist():
                chosen = buckets == k
                runs.append((rows[chosen], k))
                columns.append(self._bucket_places(part, k, within[chosen]))
        source, bucket, entry, pad = (np.concatenate(c) for c in zip(*columns, strict=True))
        keys = self.mix.stream_ids(source, bucket, entry) * 2 + pad
        found: list[tuple[int, np.ndarray, np.ndarray]] = [None] * len(places)  # type: ignore
        at = 0
        for rows, k in runs:
            batches = keys[at:at + len(rows) * self.batch_sizes[k]].reshape(len(rows), -1)
            batches.sort(axis=1)
            at += batches.size
            for row, key in zip(rows.tolist(), batches, strict=True):
                found[row] = (k, key >> 1, (key & 1).astype(bool))
        return found

    def _bucket_places(self, part: _Part, k: int, batches: np.ndarray) -> tuple[np.ndarray, ...]:
        """Source, bucket, bucket stream entry and padding flag of each place of bucket k's
        `batches` of a part (places past the bucket's images repeat its beginning)."""
        size, n = self.batch_sizes[k], int(part.places[k])
        at = (batches[:, None] * size + np.arange(size)).ravel()
        source, rank = interleave(part.quota[:, k].tolist(), at % n)
        return (source, np.full(len(at), k), part.starts[source, k] + rank,
                (at >= n).astype(np.int64))

    def drawn(self, place: int) -> np.ndarray:
        """Images of each source in the first `place` global batches, by formula."""
        total = np.zeros(len(self.mix.table), dtype=np.int64)
        for part, end in zip(self.parts, self.ends.tolist(), strict=True):
            done = min(max(0, place - (end - part.total)), part.total)
            if not done:
                continue
            batches = np.zeros(len(self.batch_sizes), dtype=np.int64)
            batches[part.order] = prefix(part.batches[part.order].tolist(), done)
            total += part.images_in(batches, self._sizes)
        return total


@dataclass(frozen=True)
class BucketMixStart:
    """A bucketed mixture's epoch before any batch: laid out at the world size that first
    draws from it (which places its phases); what is left after that is a BucketStream of
    that layout, continued at any world size."""

    mix: BucketMixture
    epoch: int

    def at(self, world_size: int) -> BucketStream:
        return BucketStream(self.mix.epoch(self.epoch, world_size))

    def batches_per_rank(self, world_size: int) -> int:
        return self.at(world_size).batches_per_rank(world_size)

    def has_batches(self, world_size: int, count: int) -> bool:
        return self.at(world_size).has_batches(world_size, count)

    def after(self, world_size: int, batches_done: int) -> BucketStream:
        return self.at(world_size).after(world_size, batches_done)

    def rank_plan(self, rank: int, world_size: int) -> RankBuckets:
        return self.at(world_size).rank_plan(rank, world_size)
