"""The profiler: is training input-, compute- or overhead-bound, and which stage is to blame."""

from __future__ import annotations

from pathlib import Path

from datapipe.profiling.gpu import DeviceClock
from datapipe.profiling.recorder import Profiler
from datapipe.profiling.settings import ProfileSettings

_DEFAULTS = ProfileSettings()


def profile(report: str | Path | None = None, trace: str | Path | None = None,
            html: str | Path | None = None, *, scaling_test: bool = False, oracle: bool = False,
            highly_input_bound: float = _DEFAULTS.highly_input_bound,
            moderately_input_bound: float = _DEFAULTS.moderately_input_bound,
            warmup_steps: int = _DEFAULTS.warmup_steps,
            probe_steps: int = _DEFAULTS.probe_steps,
            device_clock: DeviceClock | None = None) -> Profiler:
    """Use as ``with dp.profile() as prof: for batch in prof.wrap(loader): ...; prof.step()``.

    Files are written when the block ends; ``prof.report()`` gives the terminal report.
    ``scaling_test`` and ``oracle`` insert a few extra steps after `warmup_steps`: the last
    batch replayed (no loading: a perfect input pipeline) and, for the scaling test, that
    batch doubled (to tell per-step overhead from compute). Where the process uses CUDA the
    device is timed with CUDA events; ``device_clock`` replaces that source (see
    `datapipe.profiling.gpu.DeviceClock`).
    """
    return Profiler(ProfileSettings(
        report=Path(report) if report else None, trace=Path(trace) if trace else None,
        html=Path(html) if html else None, scaling_test=scaling_test, oracle=oracle or
        scaling_test, highly_input_bound=highly_input_bound,
        moderately_input_bound=moderately_input_bound, warmup_steps=warmup_steps,
        probe_steps=probe_steps), device_clock=device_clock)


__all__ = ["DeviceClock", "ProfileSettings", "Profiler", "profile"]
