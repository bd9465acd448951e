"""The whole-epoch token planner the loaders used before they planned a window at a time:
every batch of an epoch planned at once, ranks drawn round robin, a resume at another world
size replanning the pieces not drawn. Tests keep it as a reference for the planners' pieces."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from datapipe.sampling.elastic import drawn_prefix
from datapipe.sampling.tokens import Pieces, TokenPlan


def whole_pieces(order: np.ndarray, lengths: np.ndarray) -> Pieces:
    """Every document of `order`, whole."""
    return Pieces(order, np.zeros(len(order), dtype=np.int64), lengths[order].astype(np.int64))


def split_by_rank(plan: TokenPlan, rank: int, world_size: int) -> tuple[TokenPlan, np.ndarray]:
    """Round-robin batches over ranks; every rank gets the same count, the shortfall made up by
    repeats flagged as padding (so ranks step together and real batches are seen once)."""
    n = len(plan)
    if world_size == 1:
        return plan, np.zeros(n, dtype=bool)  # every batch, in order: nothing to take
    per_rank = -(-n // world_size) if n else 0
    ids = np.arange(per_rank * world_size)
    is_pad = ids >= n
    ids = np.where(is_pad, ids % max(n, 1), ids)
    return plan.take(ids[rank::world_size]), is_pad[rank::world_size]


def undrawn_pieces(plan: TokenPlan, drawn_batches: int, epoch_place: np.ndarray) -> Pieces:
    """The segments of the batches after the first `drawn_batches`, back in epoch order
    (`epoch_place[d]`: document d's place in the epoch's order, then by start), with the pieces
    of a document that meet joined again, so a planner sees what is left as it would a fresh
    (shorter) epoch."""
    first = plan.row_offsets[plan.batch_offsets[drawn_batches]]
    doc, start, end = plan.doc[first:], plan.start[first:], plan.end[first:]
    by_place = np.lexsort((start, epoch_place[doc]))
    doc, start, end = doc[by_place], start[by_place], end[by_place]
    if not len(doc):
        return Pieces(doc, start, end)
    continues = np.zeros(len(doc), dtype=bool)
    continues[1:] = (doc[1:] == doc[:-1]) & (start[1:] == end[:-1])
    heads = np.flatnonzero(~continues)
    tails = np.append(heads[1:], len(doc)) - 1
    return Pieces(doc[heads], start[heads], end[tails])


@dataclass(frozen=True)
class TokenRemainder:
    """What is left of an epoch of token batches: its global plan (batches as the ranks draw
    them round robin) and how to plan the pieces left after a segment."""

    plan: TokenPlan
    replan: Callable[[Pieces], TokenPlan]
    epoch_place: np.ndarray  # per document: its place in the epoch's order

    @classmethod
    def start(cls, order: np.ndarray, lengths: np.ndarray,
              replan: Callable[[Pieces], TokenPlan]) -> TokenRemainder:
        place = np.full(len(lengths), -1, dtype=np.int64)  # -1: not in this epoch (dropped)
        place[order] = np.arange(len(order))
        return cls(replan(whole_pieces(order, lengths)), replan, place)

    def batches_per_rank(self, world_size: int) -> int:
        return -(-len(self.plan) // world_size)

    def has_batches(self, world_size: int, count: int) -> bool:
        return count <= self.batches_per_rank(world_size)

    def after(self, world_size: int, batches_done: int) -> TokenRemainder:
        drawn = drawn_prefix(len(self.plan), world_size, batches_done)
        if drawn == 0:
            return self
        return replace(self, plan=self.replan(undrawn_pieces(self.plan, drawn,
                                                             self.epoch_place)))

    def rank_plan(self, rank: int, world_size: int) -> tuple[TokenPlan, np.ndarray]:
        return split_by_rank(self.plan, rank, world_size)
