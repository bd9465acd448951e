"""An epoch resumed at other world sizes: the ranks' batches before and after, drawn from the
plans themselves (not from the prefix formula the remainders use), cover the epoch exactly
once."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest

from datapipe.errors import ArgumentError
from datapipe.sampling.elastic import Segment, follow, parse_lineage
from datapipe.sampling.order import KeyedOrder, SampleRemainder
from datapipe.sampling.tokens import (
    Pieces,
    TokenPlan,
    plan_fixed,
    plan_packed,
    plan_padded,
)
from tests.sampling.token_reference import TokenRemainder, split_by_rank

# --- images --------------------------------------------------------------------------------


def _left(rest: SampleRemainder) -> list[int]:
    """The sample ids of what is left, in epoch order."""
    return rest.order.at(np.arange(rest.start, len(rest.order))).tolist()


def _drawn_samples(rest: SampleRemainder, world: int, batches: int | None) -> list[int]:
    """The real samples every rank of `world` draws in its first `batches` (None: all)."""
    seen = []
    for rank in range(world):
        plan = rest.rank_plan(rank, world)
        for b in range(len(plan) if batches is None else batches):
            idx, pad = plan.batch(b)
            seen.extend(idx[~pad].tolist())
    return seen


def _every_stop(start: SampleRemainder, worlds: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every way to stop after k batches in each world of `worlds` but the last."""
    counts: list[tuple[int, ...]] = [()]
    for i, world in enumerate(worlds[:-1]):
        counts = [c + (k,) for c in counts for k in range(
            follow(start, [Segment(w, d) for w, d in zip(worlds[:i], c, strict=True)], 0)
            .batches_per_rank(world) + 1)]
    return counts


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("worlds", [(2, 3), (3, 2), (1, 4), (4, 1), (2, 3, 2), (3, 5, 2),
                                    (2, 2)])
def test_images_resumed_at_other_world_sizes_see_every_sample_once(
        worlds: tuple[int, ...], drop_last: bool) -> None:
    for n, batch in itertools.product((0, 1, 7, 23, 50), (1, 3, 4)):
        start = SampleRemainder(KeyedOrder(n, 3, 1, True), batch, drop_last)
        for done in _every_stop(start, worlds):
            lineage = [Segment(w, k) for w, k in zip(worlds[:-1], done, strict=True)]
            seen, rest = [], start
            for segment in lineage:
                seen += _drawn_samples(rest, segment.world_size, segment.batches_done)
                rest = rest.after(segment.world_size, segment.batches_done)
            assert _left(rest) == [i for i in _left(start) if i not in seen], \
                "what is left is the epoch's order minus what was drawn"
            seen += _drawn_samples(rest, worlds[-1], None)
            counted = Counter(seen)
            assert max(counted.values(), default=1) == 1, (n, batch, done, "a repeat")
            if not drop_last:
                assert sorted(counted) == list(range(n)), (n, batch, done, "a sample lost")
            else:  # only the last world's dropped tail goes unseen, as in any drop_last epoch
                steps = rest.batches_per_rank(worlds[-1])
                assert n - len(counted) == len(rest) - min(len(rest), steps * batch * worlds[-1])


def test_images_at_the_same_world_size_keep_todays_order() -> None:
    start = SampleRemainder(KeyedOrder(50, 0, 0, True), 4, False)
    assert follow(start, [], 0) is start
    rest = start.after(2, 3)
    assert rest.order is start.order and rest.start == 24, "an offset into the same order"
    assert _left(rest) == _left(start)[24:]


# --- tokens --------------------------------------------------------------------------------

LENGTHS = np.random.default_rng(7).integers(0, 40, 60)


def _packed(pieces: Pieces) -> TokenPlan:
    return plan_packed(pieces, 37, 1, None)


def _padded(pieces: Pieces) -> TokenPlan:
    return plan_padded(pieces, 96, 8, None, 1, 2, np.random.default_rng(1))


def _fixed(pieces: Pieces) -> TokenPlan:
    return plan_fixed(pieces, 16, 3, 10, np.random.default_rng(1))


PLANNERS: dict[str, Callable[[Pieces], TokenPlan]] = {"packed": _packed, "padded": _padded,
                                                      "fixed": _fixed}


def _cover(coverage: list[np.ndarray], plan: TokenPlan, world: int,
           batches: int | None) -> None:
    """Count the tokens each rank's first `batches` real batches hold."""
    for rank in range(world):
        mine, is_pad = split_by_rank(plan, rank, world)
        for b in range(len(mine) if batches is None else batches):
            if is_pad[b]:
                continue
            doc, start, end, _ = mine.batch(b)
            for d, s, e in zip(doc.tolist(), start.tolist(), end.tolist(), strict=True):
                coverage[d][s:e] += 1


@pytest.mark.parametrize("layout", ["packed", "padded", "fixed"])
@pytest.mark.parametrize("worlds", [(2, 3), (3, 2), (1, 3), (2, 3, 2), (3, 2, 4)])
def test_tokens_resumed_at_other_world_sizes_see_every_token_once(layout: str,
                                                                  worlds: tuple[int, ...]) -> None:
    order = KeyedOrder(len(LENGTHS), 0, 2, True).at(np.arange(len(LENGTHS)))
    start = TokenRemainder.start(order, LENGTHS, PLANNERS[layout])
    for done in itertools.product(range(0, 9, 2), repeat=len(worlds) - 1):
        coverage = [np.zeros(n, dtype=np.int64) for n in LENGTHS]
        rest = start
        for world, k in zip(worlds, done, strict=False):
            k = min(k, rest.batches_per_rank(world))
            _cover(coverage, rest.plan, world, k)
            rest = rest.after(world, k)
        _cover(coverage, rest.plan, worlds[-1], None)
        wrong = [d for d, c in enumerate(coverage) if len(c) and not np.all(c == 1)]
        assert not wrong, f"{layout} {worlds} {done}: documents {wrong[:5]} not seen once"
        assert rest.batches_per_rank(worlds[-1]) * worlds[-1] >= len(rest.plan)


def test_tokens_left_keep_epoch_order_and_pieces_join_again() -> None:
    order = KeyedOrder(len(LENGTHS), 0, 2, True).at(np.arange(len(LENGTHS)))
    start = TokenRemainder.start(order, LENGTHS, _packed)
    rest = start.after(2, 1)  # two packed batches drawn: a document may be cut between them
    drawn = start.plan.row_offsets[start.plan.batch_offsets[2]]
    first = int(start.plan.doc[drawn])
    assert rest.plan.doc[0] == first and rest.plan.start[0] == start.plan.start[drawn]
    docs = [d for d in rest.plan.doc.tolist() if d != first]
    places = np.argsort(order)[docs]
    assert np.all(np.diff(places) >= 0), "what is left comes in epoch order"
    assert start.after(3, 0) is start, "nothing drawn: the same plan"


# --- states --------------------------------------------------------------------------------


def test_impossible_segments_are_refused_in_one_line() -> None:
    start = SampleRemainder(KeyedOrder(20, 0, 0, False), 4, False)
    with pytest.raises(ArgumentError, match="6 batches of epoch 2 were done at world_size 2 "
                                            r"\(segment 0\), but that segment has 3 per rank"):
        follow(start, [Segment(2, 6)], 2)
    with pytest.raises(ArgumentError, match="segment 1"):
        follow(start, [Segment(2, 1), Segment(3, 2)], 2)  # 12 left: 1 batch per rank at 3
    for bad in ({"world_size": 0, "batches_done": 1}, {"world_size": 2}, [2, 1],
                {"world_size": 2, "batches_done": -1}, {"world_size": True, "batches_done": 1}):
        with pytest.raises(ArgumentError, match="segments must be"):
            parse_lineage([bad])
    with pytest.raises(ArgumentError, match="must be a list"):
        parse_lineage({"world_size": 2})
    assert parse_lineage(None) == ()
