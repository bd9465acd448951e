"""What both loaders do alike for a mixture of datasets: take the arguments (`path` as a list or
dict, `weights`, `epoch_size`, `reweight`), check the sources can be mixed, and name the
mixture in a saved state, so that a state over other datasets or weights is refused, or, with
`reweight=True`, continued with the new weights from its next batch on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datapipe.errors import ArgumentError
from datapipe.format.dataset import Dataset
from datapipe.loader.arguments import check_flag
from datapipe.loader.mixture_sources import (
    Sources,
    check_mixable,
    is_mixture,
    parse_sources,
    shared_extra_columns,
)
from datapipe.loader.progress_state import LoaderPosition, manifest_fingerprint
from datapipe.sampling.elastic import is_count, parse_lineage
from datapipe.sampling.mixture import Mixture, drawn_in_epoch
from datapipe.sampling.mixture_weights import (
    MixtureWeights,
    Phase,
    ScheduleArg,
    WeightSchedule,
)


def describe(path: Any) -> str:
    """A loader's path or paths as messages name them."""
    if isinstance(path, tuple | list):
        return "[" + ", ".join(map(str, path)) + "]"
    if isinstance(path, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in path.items()) + "}"
    return str(path)


@dataclass(frozen=True)
class MixtureSetup:
    """A loader's mixture arguments, checked."""

    sources: Sources
    weights: ScheduleArg | None
    reweight: bool

    def check(self, parts: Sequence[Dataset], kind: str, relabelled: bool = False) -> None:
        check_mixable([p.manifest for p in parts], self.sources, kind, relabelled)

    def extra_columns(self, parts: Sequence[Dataset], wanted: tuple[str, ...] | None,
                      standard: set[str]) -> tuple[str, ...]:
        return shared_extra_columns([p.manifest for p in parts], self.sources, wanted, standard)

    def schedule(self, sizes: Sequence[int]) -> WeightSchedule:
        """The weights given, or each source by its size (the plain concatenation)."""
        if self.weights is None:
            return WeightSchedule.constant(MixtureWeights.proportional(sizes))
        return WeightSchedule.parse(self.weights, self.sources.names)

    def fingerprints(self, parts: Sequence[Dataset]) -> dict[str, str]:
        return {name: manifest_fingerprint(p.manifest)
                for name, p in zip(self.sources.names, parts, strict=True)}

    def identity(self, planner: dict[str, Any]) -> dict[str, Any]:
        """The state's identity entries for this mixture (beside the loader's own)."""
        return {"sources": list(self.sources.names), **planner}

    def reweighted(self, state: Any, schedule: WeightSchedule,
                   steps_per_epoch: Callable[[int], int]) -> WeightSchedule | None:
        """With `reweight=True`, for a state saved with other weights: its weights up to its
        next global step, this loader's from that step on. None: nothing to change (the same
        weights, no reweight, or a state whose faults `load_state_dict` names).
        `steps_per_epoch(world_size)`: the loader's steps in an epoch, which number the
        state's global step."""
        theirs = self.weights_to_continue(state, schedule)
        if theirs is None:
            return None
        step = state["epoch"] * steps_per_epoch(state["identity"]["world_size"])
        return splice(theirs, schedule, step + state["batches_done"])

    def weights_to_continue(self, state: Any, schedule: WeightSchedule) -> WeightSchedule | None:
        """The weights a state was saved with, where reweight=True is to continue it with
        `schedule`: other weights than these, and a position that can be counted. None
        otherwise (no reweight, the same weights, or a state whose faults
        `load_state_dict` names)."""
        saved = state.get("identity") if isinstance(state, dict) else None
        if not self.reweight or not isinstance(saved, dict):
            return None
        try:
            theirs = parse_schedule(saved.get("weights"))
            parse_lineage(state.get("segments"))
        except ArgumentError:
            return None
        world = saved.get("world_size")
        countable = is_count(world) and world >= 1 and is_count(state.get("epoch")) and \
            is_count(state.get("batches_done"))
        if theirs is None or theirs.to_json() == schedule.to_json() or not countable:
            return None
        return theirs


def parse_schedule(saved: Any) -> WeightSchedule | None:
    """A state's `weights` entry ([[start, [weights]], ...]) as a schedule; None if absent."""
    if saved is None:
        return None
    try:
        return WeightSchedule(tuple(Phase(int(start), MixtureWeights(tuple(values)))
                                    for start, values in saved))
    except (TypeError, ValueError, ArgumentError) as exc:
        raise ArgumentError(f"load_state_dict: the state's weights {saved!r} are not a weight "
                            "schedule") from exc


def splice(before: WeightSchedule, after: WeightSchedule, at: int) -> WeightSchedule:
    """`before`'s phases up to `at`, `after`'s from it on (its phase in force at `at` begins
    there)."""
    kept = [p for p in before.phases if p.start_step < at]
    later = [p for p in after.phases if p.start_step > at]
    current = [p for p in after.phases if p.start_step <= at][-1]
    return WeightSchedule((*kept, Phase(at, current.weights), *later) if kept
                          else (Phase(0, current.weights), *later))


def check_mixture_arguments(path: Any, weights: ScheduleArg | None, epoch_size: int | None,
                            reweight: Any, cache_dir: str | Path | None,
                            cache_size: int | str | None) -> MixtureSetup | None:
    """The mixture `path` names (None: one dataset, where the mixture arguments are refused)."""
    reweight = check_flag("reweight", reweight)
    if not is_mixture(path):
        for name, value in (("weights", weights), ("epoch_size", epoch_size)):
            if value is not None:
                raise ArgumentError(f"{name}= mixes several datasets; path names one ({path}): "
                                    "give a list or dict of datasets")
        return None
    sources = parse_sources(path, cache_dir, cache_size)
    if weights is not None:
        WeightSchedule.parse(weights, sources.names)  # refused now, before any dataset opens
    return MixtureSetup(sources, weights, reweight)


def samples_drawn(mixture: Mixture, position: LoaderPosition, world_size: int,
                  names: Sequence[str]) -> dict[str, dict[str, int]]:
    """Samples each source gave up to `position`, all ranks together: the epochs before whole
    (where each source's stream stands), then this one's batches handed out. Closed forms,
    segment by segment: no order is computed, so it costs the same at any size."""
    drawn = mixture.drawn_before(position.epoch, world_size) + drawn_in_epoch(
        mixture.start(position.epoch), position.segments, world_size, position.batches_done)
    return {name: {"samples": int(n)} for name, n in zip(names, drawn, strict=True)}
