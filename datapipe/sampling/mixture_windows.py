"""A mixture's epoch order computed a window of places at a time: no array the size of the
epoch exists, so the first batch of a 10^9-sample mixture costs what a window costs.

A window is a run of whole global steps (step = batch_size x world_size places) that gives each
rank about `WINDOW_PLACES` places (at least one step). What makes one computable alone:
- each batch's per-source counts come from its group's extra places (mixture_parts.PartCounts);
- within a batch the sources come in source order, and rank r's batch b of a step lays slot j
  at place (b * B + j) * W + r; the short last step (what the quota leaves) is in the last
  window only; phases split a window at their step boundaries;
- the k-th place of source s (in place order) takes entry start_s + k of its stream, and where
  each stream stands at a window's first place is its start plus the source's count in the
  groups before, a closed form (`Layout.drawn`).
Places are asked a rank at a time, so a window is computed for the rank that asks: its places'
sources and their indices within each source (sampling/mixture_ranks.py, from the units'
counts), then the stream entries of those places alone (mixture_streams.stream_at: a keyed
shuffle per sample of a large source). A batch then costs the same at any world size. The plan
asks ascending chunks of places, so the last two windows are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from datapipe.sampling.mixture_parts import Part, PartCounts, short_step_sources, tail_places
from datapipe.sampling.mixture_ranks import rank_places
from datapipe.sampling.mixture_streams import stream_at

# A rank's places in a window (rounded to whole steps): one window serves many batches, and its
# arrays stay under 1 MB.
WINDOW_PLACES = 1 << 16
_KEPT_WINDOWS = 2


@dataclass(frozen=True, eq=False)
class Layout:
    """The places of what is left of an epoch at one world size: its parts in step order and
    where each source's stream stands at its first place."""

    parts: tuple[Part, ...]
    counts: tuple[PartCounts, ...]
    starts: np.ndarray
    world_size: int
    batch_size: int
    length: int

    @classmethod
    def of(cls, parts: Sequence[Part], starts: Sequence[int], world_size: int,
           batch_size: int, length: int) -> Layout:
        counts = tuple(PartCounts.of(part, batch_size) for part in parts)
        return cls(tuple(parts), counts, np.asarray(starts, dtype=np.int64), world_size,
                   batch_size, length)

    @property
    def group(self) -> int:
        """Places a global step holds."""
        return self.batch_size * self.world_size

    @property
    def totals(self) -> np.ndarray:
        return np.sum([p.quota for p in self.parts], axis=0, dtype=np.int64)

    def drawn(self, places: int) -> np.ndarray:
        """Samples of each source in places 0 .. places - 1: whole steps, or all of them."""
        if places >= self.length:
            return self.totals
        step, partial = divmod(places, self.group)
        if partial:
            raise ValueError(f"{places} places are not whole steps of {self.group}")
        total = np.zeros(len(self.starts), dtype=np.int64)
        for part, counts in zip(self.parts, self.counts, strict=True):
            total += counts.before(min(max(0, step - part.first_step) * self.world_size,
                                       part.units))
        return total

    def unit_counts(self, first_step: int, last_step: int) -> np.ndarray:
        """Per-source counts (steps x W x sources) of the units of the whole steps among
        first_step .. last_step - 1 (unit b * W + r of a part: rank r's batch b of it)."""
        tables = [np.zeros((0, self.world_size, len(self.starts)), dtype=np.int64)]
        for part, counts in zip(self.parts, self.counts, strict=True):
            lo = max(first_step, part.first_step)
            hi = min(last_step, part.first_step + part.units // self.world_size)
            if lo < hi:
                table = counts.groups((lo - part.first_step) * self.world_size,
                                      (hi - lo) * self.world_size)
                tables.append(table.reshape(hi - lo, self.world_size, -1))
        return np.concatenate(tables)

    def short_step(self, first_step: int, last_step: int) -> np.ndarray | None:
        """The sources of the last, short step's places in place order, if it is among
        first_step .. last_step - 1: what the last part's quota leaves after its whole
        batches, each rank's batch together."""
        part, counts = self.parts[-1], self.counts[-1]
        step = part.first_step + part.units // self.world_size
        if not part.tail or not first_step <= step < last_step:
            return None
        left = np.asarray(part.quota, dtype=np.int64) - counts.whole
        sizes = np.bincount(np.arange(part.tail) % self.world_size, minlength=self.world_size)
        out = np.empty(part.tail, dtype=np.min_scalar_type(len(part.quota)))
        out[tail_places(part.tail, self.world_size)] = short_step_sources(sizes, part.shares,
                                                                          left)
        return out


class MixtureOrder:
    """An EpochOrder over a Layout: the combined id (offsets[s] + local id) at each place.

    A rank's places are those of one residue mod W, and a window's ids are computed for a
    rank at once: each source's stream is looked up once a window, not once a plan's chunk
    (a keyed shuffle costs a fixed ~0.1 ms a call). A plan's padding (the epoch's first places
    again) may ask another rank's, computed the same way."""

    def __init__(self, layout: Layout, sizes: Sequence[int], seed: int, shuffle: bool) -> None:
        self.layout = layout
        self.sizes, self.seed, self.shuffle = tuple(sizes), seed, shuffle
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.window_steps = max(1, WINDOW_PLACES // layout.batch_size)
        self.window_places = self.window_steps * layout.group
        self._recent: tuple[tuple[tuple[int, int], np.ndarray], ...] = ()

    def __len__(self) -> int:
        return self.layout.length

    def at(self, places: np.ndarray) -> np.ndarray:
        places = np.asarray(places, dtype=np.int64)
        world = self.layout.world_size
        # Floor division by a scalar only (numpy's divmod and % by one are several times
        # slower): this runs on the training thread for every chunk of a plan.
        window = places // self.window_places
        local = places - window * self.window_places
        own = local // world
        key = window * world + (local - own * world)  # (window, rank)
        if len(key) and key.min() == key.max():
            return self.window(*divmod(int(key[0]), world))[own]
        out = np.empty(len(places), dtype=np.int64)
        for k in np.unique(key).tolist():
            chosen = key == k
            out[chosen] = self.window(*divmod(k, world))[own[chosen]]
        return out

    def window(self, w: int, rank: int) -> np.ndarray:
        """The ids of rank `rank`'s places of window `w`, in place order (kept with the one
        before: swapped whole, so a thread that asks meanwhile sees the old pair or the new
        one)."""
        for kept, ids in self._recent:
            if kept == (w, rank):
                return ids
        ids = self._compute(w, rank)
        self._recent = (((w, rank), ids), *self._recent[:_KEPT_WINDOWS - 1])
        return ids

    def _compute(self, w: int, rank: int) -> np.ndarray:
        """Source s's k-th place in the window takes entry starts[s] + k of its stream."""
        layout = self.layout
        planned = -(-layout.length // layout.group)
        first = w * self.window_steps
        if not 0 <= first < planned:
            raise IndexError(f"window {w} of an order of {layout.length} places")
        last = min(first + self.window_steps, planned)
        table = layout.unit_counts(first, last)
        sources, within = rank_places(table, rank)
        short = layout.short_step(first, last)
        if short is not None:  # its batches need not hold their sources in source order
            counts = table.sum(axis=(0, 1))
            sources = np.concatenate([sources, short[rank::layout.world_size]])
            within = np.concatenate([within, (counts[short] + _index_within_sources(short))
                                     [rank::layout.world_size]])
        starts = layout.starts + layout.drawn(first * layout.group)
        ids = np.empty(len(sources), dtype=np.int64)
        for s, count in enumerate(np.bincount(sources, minlength=len(self.sizes)).tolist()):
            if count:
                chosen = sources == s if count < len(sources) else slice(None)
                ids[chosen] = self.offsets[s] + stream_at(
                    self.sizes[s], self.seed, s, starts[s] + within[chosen], self.shuffle)
        return ids


def _index_within_sources(sources: np.ndarray) -> np.ndarray:
    """Each place's index among its source's places (a stable sort groups them in order)."""
    by_source = np.argsort(sources, kind="stable")
    counts = np.bincount(sources)
    within = np.empty(len(sources), dtype=np.int64)
    within[by_source] = np.arange(len(sources), dtype=np.int64) - np.repeat(
        np.cumsum(counts) - counts, counts)
    return within
