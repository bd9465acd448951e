"""Run a command with its datapipe loaders profiled (`datapipe profile -- python train.py`).

The command runs as a child process with DATAPIPE_PROFILE=PREFIX (see `auto`): each of its
ranks writes PREFIX's files when it exits. What is left here is the part around it: an earlier
run's files removed first (they are not this run's), and a run that failed marked partial,
its verdict withdrawn.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from datapipe.errors import ArgumentError
from datapipe.profiling.auto import (
    ENV_COMMAND,
    ENV_ORACLE,
    ENV_PREFIX,
    ENV_SCALING,
    exit_reason,
    exit_status,
    outputs,
    rank_prefixes,
    text_path,
)
from datapipe.profiling.report import withdraw_verdict


@dataclass(frozen=True)
class CommandProfile:
    returncode: int           # the command's (negative: the signal that killed it)
    failure: str | None       # why the command did not succeed; None when it did
    report: str | None        # the terminal report; None when no loader was profiled
    other_ranks: tuple[int, ...]  # ranks beside 0 that wrote PREFIX.rankN.*

    @property
    def exit_status(self) -> int:
        """The status to exit with: the command's own, or 128 + N for signal N."""
        return exit_status(self.returncode)


def profile_command(command: Sequence[str], prefix: str | Path, *, scaling_test: bool = False,
                    oracle: bool = False) -> CommandProfile:
    """Run COMMAND with every datapipe loader it iterates profiled, to PREFIX.txt, .json,
    .trace.json and .html (rank N of a distributed run: PREFIX.rankN.*). Raises ArgumentError
    when PREFIX's folder cannot be made or its files replaced, or COMMAND cannot be started."""
    target = Path(prefix).resolve()
    settings, text = outputs(target), text_path(target)
    _clear(prefix, target)
    code = _run(command, {**os.environ, ENV_PREFIX: str(target),
                          ENV_SCALING: "1" if scaling_test else "0",
                          ENV_ORACLE: "1" if oracle or scaling_test else "0",
                          ENV_COMMAND: shlex.join(command)})
    failure = exit_reason(code)
    report = withdraw_verdict(settings, text, failure) if failure else \
        text.read_text().rstrip() if text.is_file() else None
    return CommandProfile(code, failure, report or None, tuple(rank_prefixes(target)))


def _clear(prefix: str | Path, target: Path) -> None:
    """Make PREFIX's folder and remove an earlier run's files, of every rank: this run may
    have fewer ranks, and files it did not write must not pass for its own."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ArgumentError(f"{prefix}: cannot create {target.parent}: {exc.strerror}") \
            from None
    for of_rank in (target, *rank_prefixes(target).values()):
        settings = outputs(of_rank)
        for stale in (text_path(of_rank), settings.report, settings.trace, settings.html):
            try:
                stale.unlink(missing_ok=True)
            except OSError as exc:
                raise ArgumentError(f"{prefix}: cannot replace {stale}: {exc.strerror}") \
                    from None


def _run(command: Sequence[str], env: dict[str, str]) -> int:
    """The command's exit status (negative: the signal that killed it)."""
    # Ctrl-C reaches the command too: it is the command's to handle, and this process reports
    # how the command ended. (A handler, unlike SIG_IGN, is not inherited by the command.)
    previous = signal.signal(signal.SIGINT, lambda *_: None)
    try:
        return subprocess.call(list(command), env=env)
    except OSError as exc:
        raise ArgumentError(f"cannot run {command[0]!r}: {exc.strerror}") from None
    finally:
        signal.signal(signal.SIGINT, previous)
