"""Where a loader is in its epochs: the whole resumable state is a handful of counters."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from datapipe.errors import ArgumentError
from datapipe.format.hashing import hash_bytes
from datapipe.format.manifest import Manifest
from datapipe.loader.arguments import check_counter
from datapipe.sampling.elastic import Remainder, Segment, follow, is_count, parse_lineage

# Version 3: orders computed per position (a keyed shuffle; token plans a window at a time).
# States of versions 1 and 2 name positions in the whole-epoch orders before it: refused.
# Version 4: mixtures too (each source's stream a keyed shuffle per pass, token mixtures a
# window at a time): a version 3 state over one dataset names the same order, over a mixture
# an order that changed.
# Version 5: the padded layout splits each window into mega-batches of equal size (a short last
# one bucketed few documents): a version 3 or 4 state of a shuffled padded TokenLoader names an
# order that changed; any other names the same order.
STATE_VERSION = 5
_OLD_PLANNER_VERSIONS = (1, 2)
_OLD_MIXTURE_VERSIONS = (3,)
_OLD_PADDED_VERSIONS = (3, 4)
# Identity entries that states saved by older versions lack: accepted when missing.
_ADDED_LATER = ("manifest", "bucket_batches", "pack_window")
# Identity entries a state may be loaded across: the position they name is a global one.
_ELASTIC = ("rank", "world_size")


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
    # The epoch's earlier segments at other world sizes; batches_done counts within what they
    # left (sampling/elastic.py). Empty unless a state was loaded at another world size.
    segments: tuple[Segment, ...] = ()
    epoch_named: bool = field(default=False, compare=False)  # set_epoch since the last pass
    restored: bool = field(default=False, compare=False)  # loaded, no pass since
    passed: bool = field(default=False, compare=False)  # a pass has begun on this position

    def set_epoch(self, epoch: int) -> None:
        epoch = check_counter("epoch", epoch)
        if epoch != self.epoch or (self.segments and not self.restored):
            # (the second: the next pass is a complete one, so its lineage goes)
            self.epoch, self.batches_done, self.epoch_finished = epoch, 0, False
            self.segments = ()
        self.epoch_named = True

    def lineage(self, epoch: int) -> tuple[Segment, ...]:
        """The segments before the current one, for a plan of `epoch`."""
        return self.segments if epoch == self.epoch else ()

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
        continuing = self.restored and (epoch, start) == (self.epoch, self.batches_done)
        if (epoch, start) != (self.epoch, self.batches_done):
            self.epoch, self.batches_done, self.epoch_finished = epoch, start, False
        if not continuing:
            self.segments = ()
        self.epoch_named = self.restored = False
        self.passed = True
        return start


def make_state(position: LoaderPosition, identity: dict[str, Any]) -> dict[str, Any]:
    state = {"version": STATE_VERSION, "epoch": position.epoch,
             "batches_done": position.batches_done, "epoch_finished": position.epoch_finished,
             "identity": identity}
    if position.segments:
        state["segments"] = [s.to_json() for s in position.segments]
    return state


def restore_position(state: dict[str, Any], identity: dict[str, Any],
                     epoch_start: Callable[[int], Remainder],
                     reweighted: bool = False) -> LoaderPosition:
    """The position a state names, once it is shown to come from this loader's dataset and
    settings and to hold counters that make sense (`epoch_start(epoch)`: the epoch's batches,
    as the loader plans them).

    The state may come from any rank of any world size: its counters say what every rank of
    its world drew. At the same world size the position carries on as it is; at another, what
    the saved world drew becomes one more segment, and this world begins what is left.
    """
    version = state.get("version") if isinstance(state, dict) else None
    saved = state.get("identity") if isinstance(state, dict) else None
    mixed = isinstance(saved, dict) and "sources" in saved
    padded = isinstance(saved, dict) and saved.get("layout") == "padded" \
        and saved.get("shuffle") is True
    if version in _OLD_PLANNER_VERSIONS or (version in _OLD_MIXTURE_VERSIONS and mixed) \
            or (version in _OLD_PADDED_VERSIONS and padded):
        changed = "mixture" if mixed else "padded batches'" if padded else "sample"
        raise ArgumentError(f"load_state_dict: the state (version {version}) was saved by a "
                            f"datapipe whose {changed} order differs from this one's; it "
                            "cannot be continued exactly: start its epoch over (set_epoch) or "
                            "finish the run with the version that saved it")
    if version not in (STATE_VERSION, *_OLD_MIXTURE_VERSIONS, *_OLD_PADDED_VERSIONS):
        raise ArgumentError(f"load_state_dict: not a datapipe loader state (version "
                            f"{version!r})")
    _check_identity(state.get("identity"), identity, ("weights",) if reweighted else ())
    epoch = check_counter("load_state_dict: the state's epoch", state.get("epoch"))
    done = check_counter("load_state_dict: the state's batches_done", state.get("batches_done"))
    finished = state.get("epoch_finished")
    if not isinstance(finished, bool):
        raise ArgumentError("load_state_dict: the state's epoch_finished must be true or false, "
                            f"got {finished!r}")
    saved_world = _saved_world(state["identity"])
    lineage = parse_lineage(state.get("segments"))
    rest = follow(epoch_start(epoch), lineage, epoch)
    if not rest.has_batches(saved_world, done) or \
            (finished and rest.has_batches(saved_world, done + 1)):
        where = f" (after {len(lineage)} earlier segments)" if lineage else ""
        raise ArgumentError(f"load_state_dict: the state says {done} batches of epoch {epoch} "
                            f"were done{' (all of them)' if finished else ''}, but that epoch "
                            f"has {rest.batches_per_rank(saved_world)}{where}")
    position = _position_at(identity["world_size"], saved_world, epoch, done, finished, lineage,
                            lambda: epoch_start(epoch))
    position.restored = True
    return position


def _position_at(world: int, saved_world: int, epoch: int, done: int, finished: bool,
                 lineage: tuple[Segment, ...],
                 epoch_start: Callable[[], Remainder]) -> LoaderPosition:
    """The saved position, seen from a world of `world` ranks."""
    if world == saved_world:
        return LoaderPosition(epoch, done, finished, lineage)
    if finished:  # nothing of the epoch is left: only the next epoch matters, at this world
        return LoaderPosition(epoch, epoch_start().batches_per_rank(world), True)
    if done:
        lineage = (*lineage, Segment(saved_world, done))
    return LoaderPosition(epoch, 0, False, lineage)


def _saved_world(saved: dict[str, Any]) -> int:
    world, rank = saved.get("world_size"), saved.get("rank")
    if not (is_count(world) and world >= 1 and is_count(rank) and rank < world):
        raise ArgumentError(f"load_state_dict: the state's rank {rank!r} / world_size "
                            f"{world!r} are impossible (need 0 <= rank < world_size)")
    return int(world)


def _check_identity(saved: Any, identity: dict[str, Any], ignored: tuple[str, ...]) -> None:
    """`ignored`: entries a loader has already reconciled (a mixture's reweighted weights)."""
    if not isinstance(saved, dict):
        raise ArgumentError(f"load_state_dict: the state has no identity (got {saved!r})")
    changed = {k: (saved.get(k), v) for k, v in identity.items()
               if saved.get(k) != v and not (k in _ADDED_LATER and k not in saved)
               and k not in _ELASTIC and k not in ignored}
    if saved.get("sources") != identity.get("sources"):  # a mixture, one way or the other
        raise ArgumentError(f"load_state_dict: the state was saved over "
                            f"{_names(saved.get('sources'))}, this loader reads "
                            f"{_names(identity.get('sources'))}")
    if "manifest" in changed:
        raise ArgumentError("load_state_dict: the state was saved over another dataset "
                            f"({_manifest_change(saved['manifest'], identity['manifest'])})")
    if changed:
        what = ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in sorted(changed.items()))
        hint = (" (reweight=True continues it with the new weights)"
                if set(changed) == {"weights"} else "")
        raise ArgumentError(f"load_state_dict: state was saved with other settings ({what}); "
                            f"the sample order would differ{hint}")


def _names(sources: Any) -> str:
    if isinstance(sources, list):
        return "a mixture of " + ", ".join(map(repr, sources))
    return "one dataset"


def _manifest_change(saved: Any, now: Any) -> str:
    """Which dataset changed: a mixture's by its source's name."""
    if isinstance(saved, dict) and isinstance(now, dict):
        name = next((n for n in now if saved.get(n) != now[n]), None)
        if name is not None:
            return f"source {name!r}: manifest {saved.get(name)}, this one {now[name]}"
    return f"manifest {saved}, this one {now}"
