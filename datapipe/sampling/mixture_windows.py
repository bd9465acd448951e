"""A mixture's epoch order computed a window of places at a time: no array the size of the
epoch exists, so the first batch of a 10^9-sample mixture costs what a window costs.

A window is a run of whole global steps (step = batch_size x world_size places, about
`WINDOW_PLACES` a window, at least one step). What makes one computable alone:
- each batch's per-source counts come from its group's extra places (mixture_parts.PartCounts);
- within a batch the sources come in source order, and rank r's batch b of a step lays slot j
  at place (b * B + j) * W + r; the short last step (what the quota leaves) is in the last
  window only; phases split a window at their step boundaries;
- the k-th place of source s (in place order) takes entry start_s + k of its stream, and where
  each stream stands at a window's first place is its start plus the source's count in the
  groups before, a closed form (`Layout.drawn`). A window then takes one stream slice per
  source (mixture_streams.stream_slice), which costs what it holds.
The plan asks ascending chunks of places, so the last two windows are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from datapipe.sampling.mixture_parts import Part, PartCounts, short_step_sources, tail_places
from datapipe.sampling.mixture_streams import stream_slice

# Places a window holds (rounded to whole steps): one window serves many batches of every rank,
# and its arrays stay around 1 MB.
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

    def sources(self, first_step: int, last_step: int) -> np.ndarray:
        """The source of each place of steps first_step .. last_step - 1, in place order."""
        pieces = []
        for part, counts in zip(self.parts, self.counts, strict=True):
            whole_end = part.first_step + part.units // self.world_size
            lo, hi = max(first_step, part.first_step), min(last_step, whole_end)
            if lo < hi:
                pieces.append(self._whole_steps(counts, lo - part.first_step, hi - lo))
            if part.tail and first_step <= whole_end < last_step:
                pieces.append(self._short_step(part, counts))
        return np.concatenate(pieces) if len(pieces) > 1 else pieces[0]

    def _whole_steps(self, counts: PartCounts, first: int, steps: int) -> np.ndarray:
        """Sources of a part's whole steps first .. first + steps - 1: unit b * W + r holds
        rank r's batch b, in source order; its slot j is place (b * B + j) * W + r."""
        table = counts.groups(first * self.world_size, steps * self.world_size)
        sources = table.shape[1]
        kind = np.min_scalar_type(sources)
        in_order = np.repeat(np.tile(np.arange(sources, dtype=kind), len(table)), table.ravel())
        return in_order.reshape(steps, self.world_size, self.batch_size) \
            .transpose(0, 2, 1).ravel()

    def _short_step(self, part: Part, counts: PartCounts) -> np.ndarray:
        """Sources of the last, short step, from what the part's quota leaves after its whole
        batches, each rank's batch together."""
        left = np.asarray(part.quota, dtype=np.int64) - counts.whole
        sizes = np.bincount(np.arange(part.tail) % self.world_size, minlength=self.world_size)
        out = np.empty(part.tail, dtype=np.min_scalar_type(len(part.quota)))
        out[tail_places(part.tail, self.world_size)] = short_step_sources(sizes, part.shares,
                                                                          left)
        return out


class MixtureOrder:
    """An EpochOrder over a Layout: the combined id (offsets[s] + local id) at each place."""

    def __init__(self, layout: Layout, sizes: Sequence[int], seed: int, shuffle: bool) -> None:
        self.layout = layout
        self.sizes, self.seed, self.shuffle = tuple(sizes), seed, shuffle
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.window_steps = max(1, WINDOW_PLACES // layout.group)
        self.window_places = self.window_steps * layout.group
        self._recent: tuple[tuple[int, np.ndarray], ...] = ()

    def __len__(self) -> int:
        return self.layout.length

    def at(self, places: np.ndarray) -> np.ndarray:
        places = np.asarray(places, dtype=np.int64)
        if len(places) == 0:
            return np.zeros(0, dtype=np.int64)
        window = places // self.window_places
        lo, hi = int(window.min()), int(window.max())
        if lo == hi:
            return self.window(lo)[places - lo * self.window_places]
        out = np.empty(len(places), dtype=np.int64)
        for w in range(lo, hi + 1):
            chosen = window == w
            if chosen.any():
                out[chosen] = self.window(w)[places[chosen] - w * self.window_places]
        return out

    def window(self, w: int) -> np.ndarray:
        """The ids of window `w`'s places (kept with the one before: swapped whole, so a thread
        that asks meanwhile sees the old pair or the new one)."""
        for kept, ids in self._recent:
            if kept == w:
                return ids
        ids = self._compute(w)
        self._recent = ((w, ids), *self._recent[:_KEPT_WINDOWS - 1])
        return ids

    def _compute(self, w: int) -> np.ndarray:
        layout = self.layout
        planned = -(-layout.length // layout.group)
        first = w * self.window_steps
        if not 0 <= first < planned:
            raise IndexError(f"window {w} of an order of {layout.length} places")
        sources = layout.sources(first, min(first + self.window_steps, planned))
        starts = layout.starts + layout.drawn(first * layout.group)
        ids = np.empty(len(sources), dtype=np.int64)
        for s, count in enumerate(np.bincount(sources, minlength=len(self.sizes)).tolist()):
            if count:
                # One pass per source, in place order: faster than scattering by a sort.
                ids[sources == s] = self.offsets[s] + stream_slice(
                    self.sizes[s], self.seed, s, int(starts[s]), count, self.shuffle)
        return ids
