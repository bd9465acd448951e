"""Where a loader is in its epochs: the whole resumable state is a handful of counters."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from datapipe.errors import ArgumentError
from datapipe.format.hashing import hash_bytes
from datapipe.format.manifest import Manifest

STATE_VERSION = 1
# Identity entries that states saved by older versions lack: accepted when missing.
_ADDED_LATER = ("manifest",)


def check_counter(name: str, value: Any) -> int:
    """A seed or an epoch: a non-negative integer (NumPy integers too), as an int."""
    if isinstance(value, bool) or not hasattr(value, "__index__") or value.__index__() < 0:
        raise ArgumentError(f"{name} must be a non-negative integer, got {value!r}")
    return value.__index__()


def manifest_fingerprint(manifest: Manifest) -> str:
    """What the data is (each shard's name, rows and content hash), not where it lies: a state
    from another dataset with as many samples is told apart, a copied dataset is not."""
    shards = [[s.name, s.rows, s.hash] for s in manifest.shards]
    return hash_bytes(json.dumps([manifest.kind, shards]).encode())


@dataclass
class LoaderPosition:
    """Order is a pure function of (seed, epoch, rank, world size), so a position is enough.

    Every pass (one `iter()`, begun at its first `next()`) is a new, complete pass over an
    epoch, as with DataLoader: the epoch that `set_epoch` named, else the one after the last
    pass (finished or abandoned). The exception is the first pass after `load_state_dict`,
    which continues the saved one.
    """

    epoch: int = 0
    batches_done: int = 0
    epoch_finished: bool = False
    epoch_named: bool = field(default=False, compare=False)  # set_epoch since the last pass
    restored: bool = field(default=False, compare=False)  # loaded, no pass since
    passed: bool = field(default=False, compare=False)  # a pass has begun on this position

    def set_epoch(self, epoch: int) -> None:
        epoch = check_counter("epoch", epoch)
        if epoch != self.epoch:
            self.epoch, self.batches_done, self.epoch_finished = epoch, 0, False
        self.epoch_named = True

    def next_pass(self) -> tuple[int, int]:
        """(epoch, first batch) of the pass the next iteration would begin.

        A restored state continues its pass; one saved after an epoch's last batch moves on to
        the next epoch, unless set_epoch named that same epoch (then nothing more of it comes).
        """
        if self.restored:
            if self.epoch_finished and not self.epoch_named:
                return self.epoch + 1, 0
            return self.epoch, self.batches_done
        if self.epoch_named:
            return self.epoch, 0
        if self.passed:
            return self.epoch + 1, 0
        return self.epoch, self.batches_done

    def begin_pass(self) -> int:
        """Called when an iteration starts; returns the first batch to produce."""
        epoch, start = self.next_pass()
        if (epoch, start) != (self.epoch, self.batches_done):
            self.epoch, self.batches_done, self.epoch_finished = epoch, start, False
        self.epoch_named = self.restored = False
        self.passed = True
        return start


def make_state(position: LoaderPosition, identity: dict[str, Any]) -> dict[str, Any]:
    return {"version": STATE_VERSION, "epoch": position.epoch,
            "batches_done": position.batches_done, "epoch_finished": position.epoch_finished,
            "identity": identity}


def restore_position(state: dict[str, Any], identity: dict[str, Any],
                     count_batches: Callable[[int], int]) -> LoaderPosition:
    """The position a state names, once it is shown to come from this loader's dataset and
    settings and to hold counters that make sense (`count_batches(epoch)`: batches in it)."""
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        raise ArgumentError(f"load_state_dict: not a datapipe loader state (version "
                            f"{state.get('version') if isinstance(state, dict) else None!r})")
    _check_identity(state.get("identity"), identity)
    epoch = check_counter("load_state_dict: the state's epoch", state.get("epoch"))
    done = check_counter("load_state_dict: the state's batches_done", state.get("batches_done"))
    finished = state.get("epoch_finished")
    if not isinstance(finished, bool):
        raise ArgumentError("load_state_dict: the state's epoch_finished must be true or false, "
                            f"got {finished!r}")
    total = count_batches(epoch)
    if done > total or (finished and done != total):
        raise ArgumentError(f"load_state_dict: the state says {done} batches of epoch {epoch} "
                            f"were done{' (all of them)' if finished else ''}, but that epoch "
                            f"has {total}")
    position = LoaderPosition(epoch, done, finished)
    position.restored = True
    return position


def _check_identity(saved: Any, identity: dict[str, Any]) -> None:
    if not isinstance(saved, dict):
        raise ArgumentError(f"load_state_dict: the state has no identity (got {saved!r})")
    changed = {k: (saved.get(k), v) for k, v in identity.items()
               if saved.get(k) != v and not (k in _ADDED_LATER and k not in saved)}
    if "manifest" in changed:
        raise ArgumentError("load_state_dict: the state was saved over another dataset "
                            f"(manifest {saved['manifest']}, this one {identity['manifest']})")
    if changed:
        what = ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in sorted(changed.items()))
        raise ArgumentError(f"load_state_dict: state was saved with other settings ({what}); "
                            "the sample order would differ")
