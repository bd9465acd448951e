"""Profiling switched on from the environment, for `datapipe profile -- python train.py`.

DATAPIPE_PROFILE=PREFIX makes every datapipe loader iterate through one process-wide profiler;
when the script exits, PREFIX.json, PREFIX.trace.json, PREFIX.html and PREFIX.txt are written.
What the command itself needs is here too: the file names (`outputs`, `text_path`) and how
the script ended (`exit_reason`, `exit_status`); a script that did not finish gets its verdict
withdrawn (`report.withdraw_verdict`).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
from pathlib import Path

from datapipe.profiling.recorder import Profiler
from datapipe.profiling.settings import ProfileSettings

ENV_PREFIX = "DATAPIPE_PROFILE"
ENV_SCALING = "DATAPIPE_PROFILE_SCALING_TEST"
ENV_ORACLE = "DATAPIPE_PROFILE_ORACLE"

_profiler: Profiler | None = None


def outputs(prefix: str | Path, *, scaling_test: bool = False,
            oracle: bool = False) -> ProfileSettings:
    return ProfileSettings(report=Path(f"{prefix}.json"), trace=Path(f"{prefix}.trace.json"),
                           html=Path(f"{prefix}.html"), scaling_test=scaling_test,
                           oracle=oracle)


def text_path(prefix: str | Path) -> Path:
    return Path(f"{prefix}.txt")


def auto_profiler() -> Profiler | None:
    global _profiler
    prefix = os.environ.get(ENV_PREFIX)
    if not prefix:
        return None
    if _profiler is None:
        _profiler = Profiler(outputs(prefix, scaling_test=os.environ.get(ENV_SCALING) == "1",
                                     oracle=os.environ.get(ENV_ORACLE) == "1"))
        atexit.register(_write, text_path(prefix))
        _import_outputs()
    return _profiler


def _import_outputs() -> None:
    """Import now what writing the profile needs: a module first imported while the script
    exits makes an interpreter ended by Ctrl-C exit with status 1 instead of by SIGINT."""
    import datapipe.profiling.analysis
    import datapipe.profiling.plot
    import datapipe.profiling.report
    import datapipe.profiling.trace  # noqa: F401


def _write(text_path: Path) -> None:
    if _profiler is None or not _profiler.recording.steps:
        return
    crashed = getattr(sys, "last_value", None)  # set when an uncaught exception ended it
    if crashed is not None:
        _profiler.recording.incomplete = f"the script raised {type(crashed).__name__}"
    try:
        _profiler.save()
        text_path.write_text(_profiler.report() + "\n")
    except Exception as exc:  # the script's own outcome matters more than its profile
        print(f"datapipe profile: could not write the profile: {type(exc).__name__}: {exc}",
              file=sys.stderr)


def exit_reason(code: int) -> str | None:
    """Why a command ended, when it did not succeed (None when it did)."""
    if code == 0:
        return None
    if code < 0:
        try:
            name = f" ({signal.Signals(-code).name})"
        except ValueError:
            name = ""
        return f"the command was killed by signal {-code}{name}"
    return f"the command exited with code {code}"


def exit_status(code: int) -> int:
    """The status to exit with: the command's own, or 128 + N for a signal, as shells do."""
    return 128 - code if code < 0 else code
