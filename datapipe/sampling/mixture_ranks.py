"""One rank's places of a run of a mixture's steps: the source of each, and its index among
that source's places of the run, from the batches' per-source counts alone.

Step b holds W batches (units), unit r rank r's batch, its sources in source order: source s
fills its slots C[r, s] .. C[r, s] + c[r, s] - 1, and slot j of unit r is the step's place
j * W + r. Rank r's place at slot j of source s therefore follows, among source s's places of
the step, sum over units r' of clip(j + [r' < r] - C[r', s], 0, c[r', s]) of them. With
clip(y, 0, c) = relu(y) - relu(y - c), each sum is two sums of relu(j - K) over a row of W
numbers K, which a sorted row and its prefix sums answer for any j by one binary search. So a
rank pays for its own places (and a sort of the steps' counts), not for all W ranks' places.
"""

from __future__ import annotations

import numpy as np


def rank_places(table: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(source, index within its source over the run) of rank `rank`'s places of whole steps,
    in place order; `table` is the counts (steps x W x sources) of each step's units."""
    steps, world, count = table.shape
    own = table[:, rank, :]
    batch = int(own[0].sum()) if steps else 0
    source = np.repeat(np.tile(np.arange(count, dtype=np.min_scalar_type(count)), steps),
                       own.ravel())
    step = np.repeat(np.arange(steps, dtype=np.int64), batch)
    slot = np.tile(np.arange(batch, dtype=np.int64), steps)
    first = np.cumsum(table, axis=2) - table  # C: each source's first slot in each unit
    earlier = (np.arange(world) < rank)[None, :, None]  # units whose slot j comes before ours
    row = step * count + source
    in_step = (_relu_sums(first - earlier, row, slot)
               - _relu_sums(first + table - earlier, row, slot))
    totals = table.sum(axis=1)  # per step and source
    before = np.cumsum(totals, axis=0) - totals
    return source, before[step, source] + in_step


def _relu_sums(keys: np.ndarray, row: np.ndarray, x: np.ndarray) -> np.ndarray:
    """sum over r of max(x - keys[b, r, s], 0) for each query (row = b * sources + s, x)."""
    steps, world, count = keys.shape
    if len(x) == 0:
        return np.zeros(0, dtype=np.int64)
    rows = np.sort(keys.transpose(0, 2, 1).reshape(steps * count, world), axis=1)
    prefix = np.zeros((len(rows), world + 1), dtype=np.int64)
    np.cumsum(rows, axis=1, out=prefix[:, 1:])
    # All rows in one sorted array: row i's keys (and its queries) shifted into
    # [i * span, (i + 1) * span), so one binary search counts the keys below x in its row.
    low = min(0, int(rows.min()))
    span = max(int(rows.max()), int(x.max())) - low + 1
    shift = np.arange(len(rows), dtype=np.int64)[:, None] * span - low
    below = np.searchsorted((rows + shift).ravel(), x + row * span - low) - row * world
    return below * x - prefix[row, below]
