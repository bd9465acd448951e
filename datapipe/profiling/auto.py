"""Profiling switched on from the environment, for `datapipe profile -- python train.py`.

DATAPIPE_PROFILE=PREFIX makes every datapipe loader iterate through one process-wide profiler;
when the script exits, PREFIX.json, PREFIX.trace.json, PREFIX.html and PREFIX.txt are written.
Under torchrun every rank inherits PREFIX: rank 0 writes those files and rank N writes
PREFIX.rankN.* (ranks starve differently, and one file written by all would be whichever came
last, or a mix).
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
ENV_COMMAND = "DATAPIPE_PROFILE_COMMAND"  # the command line, for advice that repeats it

_profiler: Profiler | None = None


def outputs(prefix: str | Path, *, scaling_test: bool = False, oracle: bool = False,
            command: str | None = None) -> ProfileSettings:
    return ProfileSettings(report=Path(f"{prefix}.json"), trace=Path(f"{prefix}.trace.json"),
                           html=Path(f"{prefix}.html"), scaling_test=scaling_test,
                           oracle=oracle, command=command)


def text_path(prefix: str | Path) -> Path:
    return Path(f"{prefix}.txt")


def rank_prefix(prefix: str) -> str:
    """This process's own prefix: PREFIX on rank 0 (or outside distributed training),
    PREFIX.rankN on rank N. The rank comes from torchrun's RANK, else from an initialised
    process group (scripts that spawn their ranks themselves)."""
    rank = _global_rank()
    return f"{prefix}.rank{rank}" if rank else prefix


def rank_prefixes(prefix: str | Path) -> dict[int, Path]:
    """The other ranks whose text reports lie beside PREFIX's: rank -> its prefix."""
    prefix = Path(prefix)
    ranks = {}
    for text in prefix.parent.glob(f"{prefix.name}.rank*.txt"):
        rank = text.name[len(prefix.name) + len(".rank"):-len(".txt")]
        if rank.isdigit():
            ranks[int(rank)] = text.with_suffix("")
    return dict(sorted(ranks.items()))


def _global_rank() -> int:
    rank = os.environ.get("RANK", "")
    if rank.isdigit():
        return int(rank)
    if "torch" in sys.modules:  # not imported for this: a script without torch has no ranks
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    return 0


def auto_profiler() -> Profiler | None:
    global _profiler
    prefix = os.environ.get(ENV_PREFIX)
    if not prefix:
        return None
    if _profiler is None:
        prefix = rank_prefix(prefix)
        _profiler = Profiler(outputs(prefix, scaling_test=os.environ.get(ENV_SCALING) == "1",
                                     oracle=os.environ.get(ENV_ORACLE) == "1",
                                     command=os.environ.get(ENV_COMMAND) or None))
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
