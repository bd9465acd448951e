"""The mixture's order as it was first written, planned whole: an int8 source and an int64 id
per place of the epoch, and an elastic remainder that holds every id not drawn yet. Slow and
large, but short and plainly right, so the windowed order (sampling/mixture_windows.py) is
checked against it place by place."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from datapipe.format.concat import split_ids
from datapipe.sampling.elastic import drawn_prefix
from datapipe.sampling.mixture import Mixture
from datapipe.sampling.mixture_parts import (
    Part,
    short_step_sources,
    tail_places,
    whole_batches_quota,
)
from datapipe.sampling.mixture_streams import spread_counts, stream_slice


@dataclass(frozen=True)
class WholeRemainder:
    """What is left of an epoch: all of it (`pools` None), or each source's ids not drawn."""

    mixture: Mixture
    epoch: int
    pools: tuple[np.ndarray, ...] | None = None

    def __len__(self) -> int:
        return self.mixture.samples if self.pools is None else sum(map(len, self.pools))

    def order(self, world_size: int) -> np.ndarray:
        m = self.mixture
        if self.pools is None:
            parts = m.parts(self.epoch, world_size)
            before = m.drawn_before(self.epoch, world_size)
            totals = np.sum([p.quota for p in parts], axis=0, dtype=np.int64)
            pools = [stream_slice(n, m.seed, s, int(before[s]), int(totals[s]), m.shuffle)
                     for s, n in enumerate(m.sizes)]
        else:
            pools, left = list(self.pools), [len(p) for p in self.pools]
            n = sum(left)
            shares = tuple(Fraction(k, max(1, n)) for k in left)
            units = n // (m.batch_size * world_size) * world_size
            parts = [Part(0, units, n - units * m.batch_size, shares, tuple(left))]
        sources = place_sources(parts, world_size, m.batch_size, len(self))
        return fill(sources, pools, m.offsets)

    def after(self, world_size: int, batches_done: int) -> WholeRemainder:
        order = self.order(world_size)
        drawn = drawn_prefix(len(order), world_size, batches_done, self.mixture.batch_size)
        if drawn == 0:
            return self
        source, local = split_ids(order[drawn:], self.mixture.offsets)
        pools = tuple(local[source == s] for s in range(len(self.mixture.sizes)))
        return WholeRemainder(self.mixture, self.epoch, pools)

    def drawn(self, world_size: int, batches_done: int) -> np.ndarray:
        """Samples of each source all ranks drew in their first `batches_done` batches."""
        m = self.mixture
        source, _ = split_ids(self.order(world_size), m.offsets)
        share = -(-len(self) // world_size)
        steps = share // m.batch_size if m.drop_last else -(-share // m.batch_size)
        upto = min(batches_done, steps) * m.batch_size * world_size
        return np.bincount(source[:upto], minlength=len(m.sizes))


def place_sources(parts: list[Part], world_size: int, batch_size: int, n: int) -> np.ndarray:
    """The source of every place of the epoch's global order."""
    sources = np.empty(n, dtype=np.int8 if len(parts[0].shares) < 128 else np.int64)
    group = batch_size * world_size
    for part in parts:
        if part.units:
            full = spread_counts(part.units, batch_size, part.shares,
                                 whole_batches_quota(part, batch_size))
            in_order = np.repeat(np.arange(full.shape[1], dtype=sources.dtype)[None, :]
                                 .repeat(part.units, 0).ravel(), full.ravel())
            lo, steps = part.first_step * group, part.units // world_size
            sources[lo:lo + steps * group] = in_order.reshape(
                steps, world_size, batch_size).transpose(0, 2, 1).ravel()
        if part.tail:
            left = np.asarray(part.quota) - (full.sum(axis=0) if part.units else 0)
            places = n // group * group + tail_places(n - n // group * group, world_size)
            sizes = np.bincount(places % world_size, minlength=world_size)
            sources[places] = short_step_sources(sizes, part.shares, left)
    return sources


def fill(sources: np.ndarray, pools: Sequence[np.ndarray], offsets: np.ndarray) -> np.ndarray:
    """Combined ids: the k-th place of source s (in order) takes pools[s][k]."""
    ids = np.empty(len(sources), dtype=np.int64)
    for s, pool in enumerate(pools):
        ids[sources == s] = pool + offsets[s]
    return ids
