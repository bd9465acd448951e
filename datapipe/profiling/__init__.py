"""The profiler: is training input-, compute- or overhead-bound, and which stage is to blame."""

from __future__ import annotations

from pathlib import Path

from datapipe.profiling.recorder import Profiler
from datapipe.profiling.settings import ProfileSettings


def profile(report: str | Path | None = None, trace: str | Path | None = None,
            html: str | Path | None = None, *, scaling_test: bool = False, oracle: bool = False,
            highly_input_bound: float = 0.20, moderately_input_bound: float = 0.05,
            warmup_steps: int = 3, probe_steps: int = 5) -> Profiler:
    """Use as ``with dp.profile() as prof: for batch in prof.wrap(loader): ...; prof.step()``.

    Files are written when the block ends; ``prof.report()`` gives the terminal report.
    ``scaling_test`` and ``oracle`` insert a few extra steps after `warmup_steps`: the last
    batch replayed (no loading: a perfect input pipeline) and, for the scaling test, that
    batch doubled (to tell per-step overhead from compute).
    """
    return Profiler(ProfileSettings(
        report=Path(report) if report else None, trace=Path(trace) if trace else None,
        html=Path(html) if html else None, scaling_test=scaling_test, oracle=oracle or
        scaling_test, highly_input_bound=highly_input_bound,
        moderately_input_bound=moderately_input_bound, warmup_steps=warmup_steps,
        probe_steps=probe_steps))


__all__ = ["ProfileSettings", "Profiler", "profile"]
