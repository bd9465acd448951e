"""The token planners against a plain reference: the same batches, byte for byte, for every
layout, world size and resume point.

The planners work on whole arrays (no Python step per batch); the reference below takes the
obvious step per batch, row and document, as the planners once did. Random lengths include
empty documents and documents longer than a row or a budget.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

import numpy as np
import pytest

from datapipe.sampling.groups import follow_cuts, offsets, ranges
from datapipe.sampling.order import KeyedOrder
from datapipe.sampling.tokens import (
    Pieces,
    TokenPlan,
    plan_fixed,
    plan_packed,
    plan_padded,
    round_up,
    split_documents,
)
from tests.sampling.token_reference import TokenRemainder

# --- the reference: a Python step per batch, row and document ------------------------------


def _from_batches(doc: np.ndarray, start: np.ndarray, end: np.ndarray,
                  batches: list[list[list[int]]]) -> TokenPlan:
    """A plan from batches of rows of segment numbers."""
    rows = [row for batch in batches for row in batch]
    segs = np.array([s for row in rows for s in row], dtype=np.int64)
    return TokenPlan(doc[segs], start[segs], end[segs],
                     np.array([0, *itertools.accumulate(map(len, rows))], dtype=np.int64),
                     np.array([0, *itertools.accumulate(map(len, batches))], dtype=np.int64))


def _greedy(sizes: list[int], budget: int, max_count: int | None) -> list[list[int]]:
    groups: list[list[int]] = []
    total = budget + 1
    for i, size in enumerate(sizes):
        if total + size > budget or (max_count and len(groups[-1]) == max_count):
            groups.append([])
            total = 0
        groups[-1].append(i)
        total += size
    return groups


def reference_packed(pieces: Pieces, max_tokens: int, pad_multiple: int,
                     batch_size: int | None) -> TokenPlan:
    budget = (max_tokens // pad_multiple) * pad_multiple
    doc, start, end = split_documents(pieces, budget)
    groups = _greedy((end - start).tolist(), budget, batch_size)
    return _from_batches(doc, start, end, [[[s] for s in g] for g in groups])


def reference_padded(pieces: Pieces, max_tokens: int, pad_multiple: int, batch_size: int | None,
                     batch_multiple: int, bucket_batches: int,
                     rng: np.random.Generator) -> TokenPlan:
    sizes = pieces.sizes.tolist()
    padded = [int(round_up(s, pad_multiple)) for s in sizes]
    mean_rows = max(1, max_tokens // max(1, int(np.mean(padded)) if sizes else 1))
    # As many mega-batches as the size gives (at least one), split as evenly as they go.
    count = max(1, round(len(sizes) / min(bucket_batches * mean_rows, max(1, len(sizes)))))
    bounds = [-(-j * len(sizes) // count) for j in range(count + 1)]
    groups = []
    for lo, hi in itertools.pairwise(bounds):
        chunk = sorted(range(lo, hi), key=lambda i: -sizes[i])
        while chunk:
            rows = max(1, max_tokens // max(1, padded[chunk[0]]))
            rows = min(rows, batch_size or rows)
            if rows >= batch_multiple:
                rows -= rows % batch_multiple
            groups.append(chunk[:rows])
            chunk = chunk[rows:]
    batches = [[[s] for s in groups[i]] for i in rng.permutation(len(groups))]
    return _from_batches(pieces.doc, pieces.start, pieces.end, batches)


def _best_fit(sizes: list[int], capacity: int) -> list[list[int]]:
    """Longest first (ties in order), each item to the open row with the least room that
    holds it; of rows with equal room, the one whose room changed last. A full row closes."""
    rows: list[list[int]] = []
    room: dict[int, tuple[int, int]] = {}  # open row -> (room left, when it changed)
    for step, item in enumerate(sorted(range(len(sizes)), key=lambda i: -sizes[i])):
        fits = [(left, -changed, row) for row, (left, changed) in room.items()
                if left >= sizes[item]]
        if fits:
            left, _, row = min(fits)
        else:
            row, left = len(rows), capacity
            rows.append([])
        rows[row].append(item)
        room.pop(row, None)
        if left > sizes[item]:
            room[row] = (left - sizes[item], step)
    return rows


def reference_fixed(pieces: Pieces, seq_len: int, rows_per_batch: int, pack_window: int,
                    rng: np.random.Generator) -> TokenPlan:
    doc, start, end = split_documents(pieces, seq_len)
    sizes = (end - start).tolist()
    rows = [[lo + i for i in row] for lo in range(0, len(sizes), pack_window)
            for row in _best_fit(sizes[lo:lo + pack_window], seq_len)]
    rows = [rows[i] for i in rng.permutation(len(rows))]
    batches = [rows[b:b + rows_per_batch] for b in range(0, len(rows), rows_per_batch)]
    return _from_batches(doc, start, end, batches)


def reference_split(plan: TokenPlan, rank: int, world_size: int) -> tuple[TokenPlan,
                                                                            np.ndarray]:
    """Batches round robin; the last round filled up with the first batches, as padding."""
    n = len(plan)
    rounds = -(-n // world_size)
    mine = [rank + r * world_size for r in range(rounds)]
    batches = [[list(range(plan.row_offsets[row], plan.row_offsets[row + 1]))
                for row in range(plan.batch_offsets[b % n], plan.batch_offsets[b % n + 1])]
               for b in mine]
    return (_from_batches(plan.doc, plan.start, plan.end, batches),
            np.array([b >= n for b in mine], dtype=bool))


# --- the comparison ------------------------------------------------------------------------


def assert_same_plan(got: TokenPlan, want: TokenPlan, what: str) -> None:
    for name in ("doc", "start", "end", "row_offsets", "batch_offsets"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), f"{what}: {name} differs"


Planners = tuple[Callable[..., TokenPlan], Callable[..., TokenPlan]]  # (package, reference)


def _settings(layout: str, rng: np.random.Generator, longest: int) -> tuple[Planners, dict]:
    """A random setting of `layout`'s planner (padded: a budget every document fits)."""
    if layout == "packed":
        multiple = int(rng.choice([1, 1, 4]))
        return (plan_packed, reference_packed), {
            "max_tokens": int(rng.integers(multiple, 60)), "pad_multiple": multiple,
            "batch_size": [None, 1, 3][rng.integers(3)]}
    if layout == "padded":
        multiple = int(rng.choice([1, 8]))
        return (plan_padded, reference_padded), {
            "max_tokens": int(round_up(longest, multiple)) + int(rng.integers(1, 200)),
            "pad_multiple": multiple, "batch_size": [None, 2, 5][rng.integers(3)],
            "batch_multiple": int(rng.choice([1, 2, 4])),
            "bucket_batches": int(rng.integers(1, 4))}
    return (plan_fixed, reference_fixed), {
        "seq_len": int(rng.integers(4, 40)), "rows_per_batch": int(rng.integers(1, 5)),
        "pack_window": int(rng.choice([3, 17, 1000]))}


def _replanner(layout: str, planner: Callable[..., TokenPlan], settings: dict,
               seed: int) -> Callable[[Pieces], TokenPlan]:
    """As TokenLoader replans: padded and fixed with a generator made anew from the seed."""
    if layout == "packed":
        return functools.partial(planner, **settings)
    return lambda pieces: planner(pieces, rng=np.random.default_rng(seed), **settings)


@pytest.mark.parametrize("layout", ["packed", "padded", "fixed"])
def test_planners_give_the_reference_batches_at_every_world_size_and_resume(
        layout: str) -> None:
    rng = np.random.default_rng({"packed": 1, "padded": 2, "fixed": 3}[layout])
    for case in range(25):
        n = int(rng.choice([0, 1, 2, 7, 40, 120]))
        lengths = rng.integers(0, 90, n) * (rng.random(n) < 0.9)  # a tenth empty
        (package, reference), settings = _settings(layout, rng, int(lengths.max(initial=0)))
        order = KeyedOrder(n, case, 1, True).at(np.arange(n))
        got = TokenRemainder.start(order, lengths, _replanner(layout, package, settings, case))
        want = TokenRemainder.start(order, lengths, _replanner(layout, reference, settings, case))
        what = f"{layout} case {case} ({n} documents, {settings})"
        assert_same_plan(got.plan, want.plan, what)
        for world, done in [(1, 0), (2, 1), (3, 2), (5, 1), (4, 0)]:
            done = min(done, want.batches_per_rank(world))
            for rank in range(world):
                (plan, pad), (ref, ref_pad) = got.rank_plan(rank, world), \
                    reference_split(want.plan, rank, world)
                assert_same_plan(plan, ref, f"{what}, rank {rank} of {world}")
                assert np.array_equal(pad, ref_pad), f"{what}, rank {rank} of {world}: padding"
            got, want = got.after(world, done), want.after(world, done)
            assert_same_plan(got.plan, want.plan, f"{what}, resumed after {done} at {world}")


# --- the array building blocks -------------------------------------------------------------


def test_offsets_and_ranges() -> None:
    assert offsets(np.array([2, 0, 3])).tolist() == [0, 2, 2, 5]
    assert ranges(np.array([5, 9, 0]), np.array([2, 0, 3])).tolist() == [5, 6, 0, 1, 2]
    assert ranges(np.array([], dtype=np.int64), np.array([], dtype=np.int64)).tolist() == []


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 8, 100, 1000])
def test_follow_cuts_takes_the_greedy_steps(n: int) -> None:
    rng = np.random.default_rng(n)
    ends = np.minimum(np.arange(n) + rng.integers(1, 4, n), n)
    want, i = [0], 0
    while i < n:
        i = int(ends[i])
        want.append(i)
    assert follow_cuts(ends).tolist() == want
