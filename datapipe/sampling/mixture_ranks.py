"""One rank's places of a run of a mixture's steps: the source of each, and its index among
that source's places of the run, from the batches' per-source counts alone.

Step b holds W batches (units), unit r rank r's batch, its sources in source order: source s
fills its slots C[r, s] .. C[r, s] + c[r, s] - 1, and slot j of unit r is the step's place
j * W + r. Rank r's place at slot j of source s therefore follows, among source s's places of
the step, sum over units r' of clip(j + [r' < r] - C[r', s], 0, c[r', s]) of them: with
clip(y, 0, c) = relu(y) - relu(y - c), a sum of +-relu(j - K) over 2W keys K per (step,
source). Over the rank's own run of slots, keys below the run add a linear term and keys inside
it a twice-summed histogram, so the work follows the rank's own places (plus the steps' counts),
not all W ranks' places.
"""

from __future__ import annotations

import numpy as np


def rank_places(table: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(source, index within its source over the run) of rank `rank`'s places of whole steps,
    in place order; `table` is the counts (steps x W x sources) of each step's units."""
    steps, world, count = table.shape
    run = table[:, rank, :].ravel()  # row (b, s): the rank's slots of source s in step b
    first = np.cumsum(table, axis=2) - table  # C: each source's first slot in each unit
    earlier = (np.arange(world) < rank)[None, :, None]  # units whose slot j comes before ours
    rise = (first - earlier).transpose(0, 2, 1).reshape(steps * count, world)
    fall = (first + table - earlier).transpose(0, 2, 1).reshape(steps * count, world)
    start = first[:, rank, :].ravel()[:, None]
    in_step = _relu_sums(rise - start, fall - start, run)
    totals = table.sum(axis=1)  # per step and source
    before = (np.cumsum(totals, axis=0) - totals).ravel()
    source = np.repeat(np.tile(np.arange(count, dtype=np.min_scalar_type(count)), steps), run)
    return source, np.repeat(before, run) + in_step


def _relu_sums(rise: np.ndarray, fall: np.ndarray, run: np.ndarray) -> np.ndarray:
    """For each row and i in 0 .. run[row] - 1, back to back: the sum over the row's `rise`
    keys K of max(i - K, 0), less the same over its `fall` keys. Keys below 0 add i - K for
    every i (a count and a sum per row); keys inside the run add a histogram summed twice
    along it; keys past it add nothing."""
    offsets = np.cumsum(run) - run
    i = np.arange(int(run.sum()), dtype=np.int64) - np.repeat(offsets, run)
    count = (rise < 0).sum(axis=1) - (fall < 0).sum(axis=1)
    weight = np.minimum(rise, 0).sum(axis=1) - np.minimum(fall, 0).sum(axis=1)
    linear = np.repeat(count, run) * i - np.repeat(weight, run)
    hist = _inside(rise, offsets, run) - _inside(fall, offsets, run)
    covered = _segment_cumsum(hist, offsets, run)  # keys at or below i
    return linear + _segment_cumsum(covered, offsets, run) - covered  # summed over i' < i


def _inside(keys: np.ndarray, offsets: np.ndarray, run: np.ndarray) -> np.ndarray:
    """How many of each row's keys fall at each i of its run."""
    inside = (keys >= 0) & (keys < run[:, None])
    return np.bincount((offsets[:, None] + keys)[inside], minlength=int(run.sum()))


def _segment_cumsum(values: np.ndarray, offsets: np.ndarray, run: np.ndarray) -> np.ndarray:
    """The running sum of `values` restarted at each row's offset."""
    total = np.cumsum(values)
    base = np.concatenate([[0], total])[offsets]  # the sum before each row
    return total - np.repeat(base, run)
