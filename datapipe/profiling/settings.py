"""Profiler settings: where to write, and the thresholds of the verdict."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from datapipe.errors import ArgumentError


@dataclass(frozen=True)
class ProfileSettings:
    report: Path | None = None      # JSON with every figure
    trace: Path | None = None       # Chrome / Perfetto trace
    html: Path | None = None        # self-contained page with the step timeline
    highly_input_bound: float = 0.20
    moderately_input_bound: float = 0.05
    scaling_test: bool = False      # re-run a few steps at 2x the batch
    oracle: bool = False            # replay cached batches: a perfect input pipeline
    warmup_steps: int = 3           # normal steps before the probes run
    probe_steps: int = 5            # steps per probe
    overhead_growth: float = 1.5    # step time growing less than this at 2x work = overhead
    oracle_tolerance: float = 0.03  # the oracle agrees within 3 points (or 20% of the figure)
    command: str | None = None      # the command `datapipe profile` ran: the advice names it

    def __post_init__(self) -> None:
        if not 0 <= self.moderately_input_bound <= self.highly_input_bound <= 1:
            raise ArgumentError("need 0 <= moderately_input_bound <= highly_input_bound <= 1, "
                                f"got {self.moderately_input_bound}, {self.highly_input_bound}")
        if self.probe_steps < 1 or self.warmup_steps < 1:
            raise ArgumentError("warmup_steps and probe_steps must be >= 1")
        if not 1 < self.overhead_growth <= 2:
            raise ArgumentError(f"overhead_growth must be in (1, 2], got {self.overhead_growth}")
        if not 0 <= self.oracle_tolerance <= 1:
            raise ArgumentError(f"oracle_tolerance must be in [0, 1], got {self.oracle_tolerance}")
