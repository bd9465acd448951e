"""Resuming an epoch at another world size: what is left of it, segment by segment.

Ranks draw an epoch's global sequence (samples for images, batches for text) round robin, and
every rank runs the same number of steps, so after each of W ranks has drawn its first k
batches, together they have drawn a prefix of that sequence (padding only repeats its
beginning). One rank's counters therefore say what every rank consumed. The rest of the epoch is
planned again, in epoch order, and shared over the new ranks with the usual rules. An epoch
resumed several times is a chain of such *segments*; the chain (its lineage) is the whole
extra state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from datapipe.errors import ArgumentError


@dataclass(frozen=True)
class Segment:
    """Part of an epoch run at one world size: each rank drew its first `batches_done`
    batches of what was left of the epoch when the segment began."""

    world_size: int
    batches_done: int

    def to_json(self) -> dict[str, int]:
        return {"world_size": self.world_size, "batches_done": self.batches_done}


class Remainder(Protocol):
    """What is left of an epoch, as a loader's planner sees it."""

    def batches_per_rank(self, world_size: int) -> int:
        """Steps every rank runs over this remainder at `world_size` (a token plan finds it by
        planning to the end: asked only where nothing cheaper will do)."""
        ...

    def has_batches(self, world_size: int, count: int) -> bool:
        """Whether every rank of `world_size` has at least `count` batches here."""
        ...

    def after(self, world_size: int, batches_done: int) -> Remainder:
        """What is left once each of `world_size` ranks drew its first `batches_done`."""
        ...

    def rank_plan(self, rank: int, world_size: int) -> Any:
        """Rank `rank`'s batches of this remainder."""
        ...


def drawn_prefix(units: int, world_size: int, batches_done: int, per_batch: int = 1) -> int:
    """How much of a global sequence of `units` W ranks drew in their first k batches.

    Rank r's j-th unit is the (r + j*W)-th of the sequence (shares are strided), so the first
    k batches of all ranks are its first k * per_batch * W places; beyond `units` they are
    padding, repeats of what was drawn already.
    """
    return min(units, batches_done * per_batch * world_size)


def follow(start: Remainder, lineage: Sequence[Segment], epoch: int) -> Remainder:
    """What is left of the epoch after the segments of `lineage`, each checked to be possible
    (no more batches done than its world size gave each rank)."""
    rest = start
    for i, segment in enumerate(lineage):
        if not rest.has_batches(segment.world_size, segment.batches_done):
            total = rest.batches_per_rank(segment.world_size)
            raise ArgumentError(
                f"load_state_dict: the state says {segment.batches_done} batches of epoch "
                f"{epoch} were done at world_size {segment.world_size} (segment {i}), but that "
                f"segment has {total} per rank")
        rest = rest.after(segment.world_size, segment.batches_done)
    return rest


def parse_lineage(saved: Any) -> tuple[Segment, ...]:
    """A state's `segments`: a list of {"world_size": W >= 1, "batches_done": k >= 0}."""
    if saved is None:
        return ()
    if not isinstance(saved, list):
        raise ArgumentError(f"load_state_dict: the state's segments must be a list, got "
                            f"{saved!r}")
    lineage = []
    for entry in saved:
        world = entry.get("world_size") if isinstance(entry, dict) else None
        done = entry.get("batches_done") if isinstance(entry, dict) else None
        if not (is_count(world) and world >= 1 and is_count(done)) or len(entry) != 2:
            raise ArgumentError("load_state_dict: each of the state's segments must be "
                                f"{{'world_size': >= 1, 'batches_done': >= 0}}, got {entry!r}")
        lineage.append(Segment(int(world), int(done)))
    return tuple(lineage)


def is_count(value: Any) -> bool:
    """A non-negative int, as JSON gives one (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
