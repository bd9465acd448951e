"""Profiling switched on from the environment, for `datapipe profile -- python train.py`.

DATAPIPE_PROFILE=PREFIX makes every datapipe loader iterate through one process-wide profiler;
when the script exits, PREFIX.json, PREFIX.trace.json, PREFIX.html and PREFIX.txt are written.
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path

from datapipe.profiling.recorder import Profiler
from datapipe.profiling.settings import ProfileSettings

ENV_PREFIX = "DATAPIPE_PROFILE"
ENV_SCALING = "DATAPIPE_PROFILE_SCALING_TEST"
ENV_ORACLE = "DATAPIPE_PROFILE_ORACLE"

_profiler: Profiler | None = None


def auto_profiler() -> Profiler | None:
    global _profiler
    prefix = os.environ.get(ENV_PREFIX)
    if not prefix:
        return None
    if _profiler is None:
        settings = ProfileSettings(report=Path(f"{prefix}.json"),
                                   trace=Path(f"{prefix}.trace.json"),
                                   html=Path(f"{prefix}.html"),
                                   scaling_test=os.environ.get(ENV_SCALING) == "1",
                                   oracle=os.environ.get(ENV_ORACLE) == "1")
        _profiler = Profiler(settings)
        atexit.register(_write, Path(f"{prefix}.txt"))
    return _profiler


def _write(text_path: Path) -> None:
    if _profiler is not None and _profiler.recording.steps:
        _profiler.save()
        text_path.write_text(_profiler.report() + "\n")
