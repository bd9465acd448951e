"""Where a loader is in its epochs: the whole resumable state is a handful of counters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from datapipe.errors import ArgumentError

STATE_VERSION = 1


def check_counter(name: str, value: Any) -> int:
    """A seed or an epoch: a non-negative integer (NumPy integers too), as an int."""
    if isinstance(value, bool) or not hasattr(value, "__index__") or value.__index__() < 0:
        raise ArgumentError(f"{name} must be a non-negative integer, got {value!r}")
    return value.__index__()


@dataclass
class LoaderPosition:
    """Order is a pure function of (seed, epoch, rank, world size), so a position is enough."""

    epoch: int = 0
    batches_done: int = 0
    epoch_finished: bool = False
    epoch_named: bool = field(default=False, compare=False)

    def set_epoch(self, epoch: int) -> None:
        epoch = check_counter("epoch", epoch)
        if epoch != self.epoch:
            self.epoch, self.batches_done, self.epoch_finished = epoch, 0, False
        self.epoch_named = True

    def begin_iteration(self) -> int:
        """Called when an iteration starts; returns the first batch to produce.

        An unfinished epoch (restored mid-epoch, or left with `break`) continues where it was.
        A finished one moves on to the next epoch by itself, unless the caller has just named
        that epoch with set_epoch: a state saved after an epoch's last batch, restored, then
        `set_epoch(same)` yields nothing more of that epoch rather than a surprise extra one.
        """
        named, self.epoch_named = self.epoch_named, False
        if self.epoch_finished and not named:
            self.epoch, self.batches_done, self.epoch_finished = self.epoch + 1, 0, False
        return self.batches_done


def make_state(position: LoaderPosition, identity: dict[str, Any]) -> dict[str, Any]:
    return {"version": STATE_VERSION, "epoch": position.epoch,
            "batches_done": position.batches_done, "epoch_finished": position.epoch_finished,
            "identity": identity}


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
