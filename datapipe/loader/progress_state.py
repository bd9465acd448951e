"""Where a loader is in its epochs: the whole resumable state is a handful of counters."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from datapipe.errors import ArgumentError

STATE_VERSION = 1


@dataclass
class LoaderPosition:
    """Order is a pure function of (seed, epoch, rank, world size), so a position is enough."""

    epoch: int = 0
    batches_done: int = 0
    epoch_finished: bool = False

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.batches_done, self.epoch_finished = epoch, 0, False

    def begin_iteration(self) -> int:
        """Called when an iteration starts; returns the first batch to produce.

        A finished epoch moves on to the next one by itself (no set_epoch call needed); an
        unfinished one (restored mid-epoch, or abandoned with `break`) continues where it was.
        """
        if self.epoch_finished:
            self.epoch, self.batches_done, self.epoch_finished = self.epoch + 1, 0, False
        return self.batches_done


def make_state(position: LoaderPosition, identity: dict[str, Any]) -> dict[str, Any]:
    return {"version": STATE_VERSION, **asdict(position), "identity": identity}


def restore_position(state: dict[str, Any], identity: dict[str, Any]) -> LoaderPosition:
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        raise ArgumentError(f"load_state_dict: not a datapipe loader state (version "
                            f"{state.get('version') if isinstance(state, dict) else None!r})")
    saved = state.get("identity", {})
    changed = {k: (saved.get(k), v) for k, v in identity.items() if saved.get(k) != v}
    if changed:
        what = ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in sorted(changed.items()))
        raise ArgumentError(f"load_state_dict: state was saved with other settings ({what}); "
                            "the sample order would differ")
    return LoaderPosition(int(state["epoch"]), int(state["batches_done"]),
                          bool(state["epoch_finished"]))
