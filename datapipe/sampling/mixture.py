"""Which samples of which sources a rank draws in an epoch of a mixture: a pure function of
(seed, epoch, rank, world size, weights, sizes), so that a loader's state stays its counters.

An epoch has `epoch_size` samples. Each source contributes its weight's share of them, taken
from its endless stream of permutations (mixture_streams.stream_slice) where the epochs before
stopped. The epoch's global order is laid out for the strided rank shares of sampling/order.py:
rank r's j-th sample is place r + j * W, so rank r's batch b is one *group* of places, and each
group is given its sources' counts directly: every batch of `batch_size` holds source s within
one sample of share_s * batch_size. The last step's batches (shorter, when the epoch does not
fill it) share what the epoch's quota leaves, each within one sample of its share where that
is possible, else within two.

Phases: the counts of a batch follow the weights in force at its global step (epoch *
steps per epoch + batch). The epochs before, and so each stream's position, are summed
arithmetically, never replayed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.format.concat import split_ids
from datapipe.sampling.elastic import Segment, drawn_prefix
from datapipe.sampling.mixture_streams import even_merge, spread_counts, stream_slice
from datapipe.sampling.mixture_weights import WeightSchedule, apportion
from datapipe.sampling.order import ArrayOrder, EpochPlan, SampleRemainder


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
class Mixture:
    """A sample-weighted mixture of sources of `sizes` samples, batched for ranks."""

    sizes: tuple[int, ...]
    schedule: WeightSchedule
    batch_size: int
    epoch_size: int | None = None  # None: the sum of the sizes
    drop_last: bool = False
    seed: int = 0
    shuffle: bool = True

    def __post_init__(self) -> None:
        for i, n in enumerate(self.sizes):
            if n < 1:
                raise ArgumentError(f"source {i} is empty: a mixture needs samples in every "
                                    "source")
        if len(self.schedule.phases[0].weights.values) != len(self.sizes):
            raise ArgumentError(f"weights has {len(self.schedule.phases[0].weights.values)} "
                                f"weights for {len(self.sizes)} sources")
        if self.batch_size < 1:
            raise ArgumentError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.epoch_size is not None and self.epoch_size < 1:
            raise ArgumentError(f"epoch_size must be >= 1 samples, got {self.epoch_size}")

    @property
    def samples(self) -> int:
        return sum(self.sizes) if self.epoch_size is None else self.epoch_size

    @property
    def offsets(self) -> np.ndarray:
        """Combined id of each source's first sample: source s's sample i is offsets[s] + i."""
        return np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)

    def identity(self) -> dict[str, object]:
        """What a state saved over this mixture must match (with the sources' manifests):
        another entry in a loader's identity, so a refusal names what changed."""
        return {"mixture_sizes": list(self.sizes), "weights": self.schedule.to_json(),
                "epoch_size": self.samples}

    def steps(self, world_size: int) -> int:
        """Batches every rank runs in an epoch (what the epoch's global steps count)."""
        return _batches_per_rank(self.samples, world_size, self.batch_size, self.drop_last)

    def parts(self, epoch: int, world_size: int) -> list[Part]:
        """The epoch's places split by the phase in force at their step."""
        n, group = self.samples, self.batch_size * world_size
        full, planned = n // group, -(-n // group)
        out = []
        for lo, hi, weights in self.schedule.spans(epoch * self.steps(world_size), planned):
            places = min(hi * group, n) - lo * group
            units = max(0, min(hi, full) - lo) * world_size
            out.append(Part(lo, units, places - units * self.batch_size, weights.shares,
                            tuple(apportion(places, weights.shares))))
        return out

    def totals(self, epoch: int, world_size: int) -> np.ndarray:
        """Samples each source contributes to the epoch."""
        return np.sum([p.quota for p in self.parts(epoch, world_size)], axis=0, dtype=np.int64)

    def drawn_before(self, epoch: int, world_size: int) -> np.ndarray:
        """Samples each source gave the epochs before `epoch`: where its stream stands.

        An epoch that no phase begins within gives the shares of the phase it lies in, so
        only the (few) epochs a phase begins within are planned one by one."""
        steps = self.steps(world_size)
        if steps == 0:  # no step is ever drawn: every epoch is planned alike
            return epoch * self.totals(0, world_size)
        planned = -(-self.samples // (self.batch_size * world_size))
        starts = [p.start_step for p in self.schedule.phases]
        crossed = {e for s in starts[1:] for e in (s // steps - 1, s // steps)
                   if 0 <= e < epoch and e * steps < s < e * steps + planned}
        total = np.zeros(len(self.sizes), dtype=np.int64)
        for e in crossed:
            total += self.totals(e, world_size)
        for i, phase in enumerate(self.schedule.phases):
            first = -(-phase.start_step // steps)
            stop = epoch if i + 1 == len(starts) else min(epoch, -(-starts[i + 1] // steps))
            whole = max(0, stop - first) - sum(first <= e < stop for e in crossed)
            if whole:
                total += whole * np.asarray(apportion(self.samples, phase.weights.shares))
        return total

    def start(self, epoch: int) -> MixtureRemainder:
        """The epoch before any batch (a loader's `_epoch_start`)."""
        return MixtureRemainder(self, epoch)


@dataclass(frozen=True)
class MixtureRemainder:
    """What is left of a mixture's epoch: the whole of it (`pools` None; its order depends on
    the world size it is drawn at), or, after a segment at another world size, each source's
    samples not drawn yet, laid out again over the new world size in proportion to what is
    left (sampling/elastic.py: what was drawn stays drawn)."""

    mixture: Mixture
    epoch: int
    pools: tuple[np.ndarray, ...] | None = None  # per source: local ids left, in stream order

    def _length(self) -> int:
        return self.mixture.samples if self.pools is None else sum(map(len, self.pools))

    def batches_per_rank(self, world_size: int) -> int:
        m = self.mixture
        return _batches_per_rank(self._length(), world_size, m.batch_size, m.drop_last)

    def has_batches(self, world_size: int, count: int) -> bool:
        return count <= self.batches_per_rank(world_size)

    def order(self, world_size: int) -> np.ndarray:
        """The combined ids of all places, as ranks draw them (strided, as EpochPlan)."""
        m = self.mixture
        if self.pools is None:
            parts = m.parts(self.epoch, world_size)
            before = m.drawn_before(self.epoch, world_size)
            totals = np.sum([p.quota for p in parts], axis=0, dtype=np.int64)
            pools = [stream_slice(n, m.seed, s, int(before[s]), int(totals[s]), m.shuffle)
                     for s, n in enumerate(m.sizes)]
        else:
            pools, left = list(self.pools), [len(p) for p in self.pools]
            shares = tuple(Fraction(n, max(1, sum(left))) for n in left)
            n = sum(left)
            units = n // (m.batch_size * world_size) * world_size
            parts = [Part(0, units, n - units * m.batch_size, shares, tuple(left))]
        sources = _place_sources(parts, world_size, m.batch_size, self._length())
        return _fill(sources, pools, m.offsets)

    def after(self, world_size: int, batches_done: int) -> MixtureRemainder:
        order = self.order(world_size)
        drawn = drawn_prefix(len(order), world_size, batches_done, self.mixture.batch_size)
        if drawn == 0:
            return self
        source, local = split_ids(order[drawn:], self.mixture.offsets)
        pools = tuple(local[source == s] for s in range(len(self.mixture.sizes)))
        return MixtureRemainder(self.mixture, self.epoch, pools)

    def rank_plan(self, rank: int, world_size: int) -> EpochPlan:
        """Rank `rank`'s batches of combined ids (split_ids gives source and local index)."""
        m = self.mixture
        rest = SampleRemainder(ArrayOrder(self.order(world_size)), m.batch_size, m.drop_last,
                               m.shuffle)
        return rest.rank_plan(rank, world_size)

    def drawn_table(self, world_size: int) -> np.ndarray:
        """Row k: samples of each source that all ranks drew in their first k batches of this
        remainder (padding, a repeat, not counted). Made once with a plan, it makes a loader's
        progress a lookup."""
        m = self.mixture
        source, _ = split_ids(self.order(world_size), m.offsets)
        steps = self.batches_per_rank(world_size)
        step = np.arange(len(source)) // (m.batch_size * world_size)
        keep = step < steps  # drop_last: the short step is never drawn
        per_step = np.bincount(step[keep] * len(m.sizes) + source[keep],
                               minlength=steps * len(m.sizes)).reshape(steps, len(m.sizes))
        table = np.zeros((steps + 1, len(m.sizes)), dtype=np.int64)
        np.cumsum(per_step, axis=0, out=table[1:])
        return table

    def drawn(self, world_size: int, batches_done: int) -> np.ndarray:
        """Samples of each source that all ranks drew in their first `batches_done` batches."""
        table = self.drawn_table(world_size)
        return table[min(batches_done, len(table) - 1)]


def drawn_in_epoch(start: MixtureRemainder, lineage: Sequence[Segment], world_size: int,
                   batches_done: int) -> np.ndarray:
    """Samples of each source drawn in an epoch so far: in the segments of `lineage`, then in
    the first `batches_done` batches at `world_size` (a loader's progress, from its state)."""
    total, rest = np.zeros(len(start.mixture.sizes), dtype=np.int64), start
    for segment in lineage:
        total += rest.drawn(segment.world_size, segment.batches_done)
        rest = rest.after(segment.world_size, segment.batches_done)
    return total + rest.drawn(world_size, batches_done)


def _batches_per_rank(n: int, world_size: int, batch_size: int, drop_last: bool) -> int:
    share = -(-n // world_size)
    return share // batch_size if drop_last else -(-share // batch_size)


def _place_sources(parts: list[Part], world_size: int, batch_size: int, n: int) -> np.ndarray:
    """The source of every place of the epoch's global order."""
    sources = np.empty(n, dtype=np.int8 if len(parts[0].shares) < 128 else np.int64)
    group = batch_size * world_size
    for part in parts:
        if part.units:
            full = spread_counts(part.units, batch_size, part.shares,
                                 _whole_batches_quota(part, batch_size))
            in_order = np.repeat(np.arange(full.shape[1], dtype=sources.dtype)[None, :]
                                 .repeat(part.units, 0).ravel(), full.ravel())
            # Batch by batch (unit b * W + r holds rank r's batch b) to strided places:
            # slot j of it is place (b * B + j) * W + r.
            lo, steps = part.first_step * group, part.units // world_size
            sources[lo:lo + steps * group] = in_order.reshape(
                steps, world_size, batch_size).transpose(0, 2, 1).ravel()
        if part.tail:
            left = np.asarray(part.quota) - (full.sum(axis=0) if part.units else 0)
            places = _tail_places(n, world_size, batch_size)
            sizes = np.bincount(places % world_size, minlength=world_size)
            sources[places] = _short_step_sources(sizes, part.shares, left)
    return sources


def _tail_places(n: int, world_size: int, batch_size: int) -> np.ndarray:
    """The places of the last, short step, rank by rank (each rank's batch together)."""
    first = n // (batch_size * world_size) * batch_size * world_size
    places = np.arange(first, n)
    return places[np.argsort(places % world_size, kind="stable")]


def _whole_batches_quota(part: Part, batch_size: int) -> list[int]:
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


def _short_step_sources(sizes: np.ndarray, shares: tuple[Fraction, ...],
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


def _fill(sources: np.ndarray, pools: Sequence[np.ndarray], offsets: np.ndarray) -> np.ndarray:
    """Combined ids: the k-th place of source s (in order) takes pools[s][k]."""
    ids = np.empty(len(sources), dtype=np.int64)
    for s, pool in enumerate(pools):
        # One pass per source, in place order: faster than scattering by a sort of sources.
        ids[sources == s] = pool + offsets[s]
    return ids
