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

No array the size of the epoch exists: the order is computed a window of steps at a time
(sampling/mixture_windows.py), what all ranks drew after k batches is a closed form, and what
an elastic resume leaves is, per source, where its stream stands and how much of it is left.
A plan over 10^9 samples costs what one over 10^4 does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.format.concat import split_ids as split_ids  # a plan's ids by source, for users
from datapipe.sampling.elastic import Segment, drawn_prefix
from datapipe.sampling.mixture_parts import Part
from datapipe.sampling.mixture_weights import WeightSchedule, apportion
from datapipe.sampling.mixture_windows import Layout, MixtureOrder
from datapipe.sampling.order import EpochPlan, SampleRemainder


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
    """What is left of a mixture's epoch: the whole of it (`left` None; its order depends on
    the world size it is drawn at), or, after a segment at another world size, each source's
    samples not drawn yet, laid out again over the new world size in proportion to what is
    left (sampling/elastic.py: what was drawn stays drawn). What was drawn is a prefix of the
    order and each source's places take its stream in order, so what is left of a source is a
    run of its stream: where it starts (`starts`) and how long it is (`left`)."""

    mixture: Mixture
    epoch: int
    starts: tuple[int, ...] | None = None  # per source: its stream's position at what is left
    left: tuple[int, ...] | None = None  # per source: samples left

    def _length(self) -> int:
        return self.mixture.samples if self.left is None else sum(self.left)

    def batches_per_rank(self, world_size: int) -> int:
        m = self.mixture
        return _batches_per_rank(self._length(), world_size, m.batch_size, m.drop_last)

    def has_batches(self, world_size: int, count: int) -> bool:
        return count <= self.batches_per_rank(world_size)

    def layout(self, world_size: int) -> Layout:
        """The places left at `world_size`, by part, and where each stream stands."""
        m = self.mixture
        if self.left is None:
            return Layout.of(m.parts(self.epoch, world_size),
                             m.drawn_before(self.epoch, world_size), world_size, m.batch_size,
                             m.samples)
        n = sum(self.left)
        shares = tuple(Fraction(k, max(1, n)) for k in self.left)
        units = n // (m.batch_size * world_size) * world_size
        part = Part(0, units, n - units * m.batch_size, shares, self.left)
        return Layout.of([part], self.starts or (), world_size, m.batch_size, n)

    def order(self, world_size: int) -> MixtureOrder:
        """The combined ids of all places, as ranks draw them (strided, as EpochPlan),
        computed a window at a time."""
        m = self.mixture
        return MixtureOrder(self.layout(world_size), m.sizes, m.seed, m.shuffle)

    def after(self, world_size: int, batches_done: int) -> MixtureRemainder:
        drawn = drawn_prefix(self._length(), world_size, batches_done, self.mixture.batch_size)
        if drawn == 0:
            return self
        layout = self.layout(world_size)
        taken = layout.drawn(drawn)
        return MixtureRemainder(self.mixture, self.epoch, _ints(layout.starts + taken),
                                _ints(layout.totals - taken))

    def rank_plan(self, rank: int, world_size: int) -> EpochPlan:
        """Rank `rank`'s batches of combined ids (split_ids gives source and local index)."""
        m = self.mixture
        rest = SampleRemainder(self.order(world_size), m.batch_size, m.drop_last, m.shuffle)
        return rest.rank_plan(rank, world_size)

    def drawn(self, world_size: int, batches_done: int) -> np.ndarray:
        """Samples of each source that all ranks drew in their first `batches_done` batches
        (padding, a repeat, not counted): a closed form, nothing planned."""
        done = min(batches_done, self.batches_per_rank(world_size))
        places = min(self._length(), done * self.mixture.batch_size * world_size)
        return self.layout(world_size).drawn(places)


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


def _ints(values: np.ndarray) -> tuple[int, ...]:
    return tuple(int(v) for v in values)
