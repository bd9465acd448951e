"""A mixture's weights: one per source, or phases of them that begin at given steps.

Weights are relative (they need not sum to 1). Shares are computed in exact rational arithmetic
(a float weight is the fraction it stores), so that a quota or a per-batch count never depends
on how a float product happened to round.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from datapipe.errors import ArgumentError

WeightsArg = Sequence[float] | Mapping[str, float]
ScheduleArg = WeightsArg | Sequence[tuple[int, WeightsArg]]


@dataclass(frozen=True)
class MixtureWeights:
    """One relative weight per source, in the sources' order."""

    values: tuple[float, ...]
    argument: str = "weights"  # what the user called it, for errors

    def __post_init__(self) -> None:
        if not self.values:
            raise ArgumentError(f"{self.argument}: no sources")
        for i, w in enumerate(self.values):
            if isinstance(w, bool) or not isinstance(w, int | float):
                raise ArgumentError(f"{self.argument}[{i}] must be a number, got {w!r}")
            if not math.isfinite(w) or w < 0:
                raise ArgumentError(f"{self.argument}[{i}] must be a finite number >= 0, "
                                    f"got {w!r}")
        if not any(self.values):
            raise ArgumentError(f"{self.argument}: all weights are zero; at least one source "
                                "must have a weight above 0")

    @classmethod
    def parse(cls, weights: Any, names: Sequence[str],
              argument: str = "weights") -> MixtureWeights:
        """From a list (one per source, in order) or a dict name -> weight (every name once)."""
        if isinstance(weights, Mapping):
            unknown = [k for k in weights if k not in names]
            if unknown:
                raise ArgumentError(f"{argument}: unknown source {unknown[0]!r} (the sources are "
                                    f"{', '.join(map(repr, names))})")
            missing = [n for n in names if n not in weights]
            if missing:
                raise ArgumentError(f"{argument}: no weight for source {missing[0]!r}")
            return cls(tuple(weights[n] for n in names), argument)
        if isinstance(weights, str | bytes) or not isinstance(weights, Sequence):
            raise ArgumentError(f"{argument} must be a list or a dict name -> weight, got "
                                f"{weights!r}")
        if len(weights) != len(names):
            raise ArgumentError(f"{argument} has {len(weights)} weights for {len(names)} "
                                "sources")
        return cls(tuple(weights), argument)

    @classmethod
    def proportional(cls, sizes: Sequence[int]) -> MixtureWeights:
        """Each source by its size: the plain concatenation of the sources."""
        return cls(tuple(float(n) for n in sizes), "sizes")

    @property
    def shares(self) -> tuple[Fraction, ...]:
        """The weights as exact fractions of their sum."""
        exact = [Fraction(w) for w in self.values]
        total = sum(exact)
        return tuple(w / total for w in exact)


def apportion(total: int, shares: Sequence[Fraction]) -> list[int]:
    """`total` split in proportion to `shares` (summing to 1) by largest remainder: each part
    is the floor or the ceiling of its exact share, and the parts sum to `total` exactly.
    Ties go to the earlier source."""
    exact = [total * s for s in shares]
    parts = [math.floor(x) for x in exact]
    left = total - sum(parts)
    by_remainder = sorted(range(len(shares)), key=lambda i: (-(exact[i] - parts[i]), i))
    for i in by_remainder[:left]:
        parts[i] += 1
    return parts


@dataclass(frozen=True)
class Phase:
    """Weights in force from global step `start_step` on (until the next phase)."""

    start_step: int
    weights: MixtureWeights


@dataclass(frozen=True)
class WeightSchedule:
    """Phases of weights by global step; the first begins at step 0."""

    phases: tuple[Phase, ...]

    def __post_init__(self) -> None:
        starts = [p.start_step for p in self.phases]
        if not starts or starts[0] != 0:
            raise ArgumentError("weights: the first phase must start at step 0, got "
                                f"{starts[:1]}")
        for before, after in itertools.pairwise(starts):
            if after <= before:
                raise ArgumentError(f"weights: phase start steps must increase, got {before} "
                                    f"then {after}")
        sizes = {len(p.weights.values) for p in self.phases}
        if len(sizes) != 1:
            raise ArgumentError("weights: every phase needs one weight per source")

    @classmethod
    def parse(cls, weights: ScheduleArg, names: Sequence[str]) -> WeightSchedule:
        """A list or dict of weights (one phase), or a list of (start_step, weights) phases."""
        if _looks_like_phases(weights):
            phases = []
            for i, entry in enumerate(weights):  # type: ignore[arg-type]
                if not (isinstance(entry, Sequence) and len(entry) == 2):
                    raise ArgumentError(f"weights[{i}] must be a (start_step, weights) pair, "
                                        f"got {entry!r}")
                start, values = entry
                if isinstance(start, bool) or not isinstance(start, int) or start < 0:
                    raise ArgumentError(f"weights[{i}]: start_step must be an int >= 0, got "
                                        f"{start!r}")
                phases.append(Phase(start, MixtureWeights.parse(values, names,
                                                                f"weights[{i}][1]")))
            return cls(tuple(phases))
        return cls((Phase(0, MixtureWeights.parse(weights, names)),))

    @classmethod
    def constant(cls, weights: MixtureWeights) -> WeightSchedule:
        return cls((Phase(0, weights),))

    def to_json(self) -> list[list]:
        """[[start_step, [weights]], ...]: what a loader's state names, to refuse another."""
        return [[p.start_step, list(p.weights.values)] for p in self.phases]

    def spans(self, first_step: int, steps: int) -> list[tuple[int, int, MixtureWeights]]:
        """The phases over steps first_step .. first_step + steps - 1, as (begin, end,
        weights) with begin/end counted from first_step; only the non-empty ones."""
        out = []
        for i, phase in enumerate(self.phases):
            end = self.phases[i + 1].start_step if i + 1 < len(self.phases) else None
            lo = max(phase.start_step - first_step, 0)
            hi = steps if end is None else min(end - first_step, steps)
            if lo < hi:
                out.append((lo, hi, phase.weights))
        return out


def _looks_like_phases(weights: Any) -> bool:
    return (isinstance(weights, Sequence) and not isinstance(weights, str | bytes)
            and len(weights) > 0 and all(isinstance(e, Sequence) and not isinstance(e, str)
                                         for e in weights))
