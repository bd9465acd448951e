"""FFCV as a peer of the images group, run in a venv of its own.

To install it, run `bash tools/setup_ffcv.sh` once in a checkout (Debian, as root: it installs
FFCV's system libraries with apt-get and makes .venv-ffcv); the suite looks for that venv in
$DATAPIPE_FFCV_VENV, else ./.venv-ffcv, else beside the checkout datapipe runs from. Without it
the images group reports ffcv as "not installed".

FFCV wants plain pillow (our venv has pillow-simd, which shares the PIL package) and builds C
code against libjpeg-turbo and OpenCV, so its runs are children under the venv's own python,
running datapipe/suite/isolated/ffcv_run.py by its path: it imports FFCV, torch and PIL, never
datapipe (not installed there).

The form: a .beton written by FFCV's DatasetWriter from the same photos, each image
re-encoded by FFCV as JPEG q90 with its longer side at most 341 px (the other converted forms'
shorter side 256, for 4:3 photos), and its label as an IntField. Like the other forms it is
made once, outside any timing, and cached until the photo set changes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from datapipe.suite.fixtures import CROP, RATIO, SCALE
from datapipe.suite.isolated import ffcv_run
from datapipe.suite.runner import Record, run_child
from datapipe.suite.venvs import Venv

SETUP_MARKER = ".ffcv-setup-2"  # written last by tools/setup_ffcv.sh
VENV = Venv(".venv-ffcv", "DATAPIPE_FFCV_VENV", SETUP_MARKER, "tools/setup_ffcv.sh")
SETUP_HINT = VENV.hint
FORM_LABEL = (f"FFCV .beton (its JPEG q{ffcv_run.JPEG_QUALITY}, longer side <= "
              f"{ffcv_run.MAX_RESOLUTION})")
# The .beton of a few thousand photos takes a minute or two; a writer still busy after this is
# stuck (FFCV's waits on its workers have no timeout of their own).
WRITE_TIMEOUT_S = 600
CHILD = Path(ffcv_run.__file__)


def venv() -> Path:
    return VENV.path()


def venv_python() -> Path:
    return VENV.python()


def ready() -> bool:
    """True once tools/setup_ffcv.sh has finished making the venv."""
    return VENV.ready()


def version() -> str | None:
    """FFCV's version in its venv (the main environment has none)."""
    return VENV.version("ffcv")


def child_env() -> dict[str, str]:
    # Nothing from the calling venv's path: FFCV's venv has its own torch and PIL.
    return {"PYTHONPATH": "", "TQDM_DISABLE": "1"}


def run_one(job: Any, run_dir: Path) -> Record:
    """Measure one run in a fresh process of FFCV's venv (see runner.run_child)."""
    payload = json.dumps({**asdict(job), "crop": CROP, "scale": SCALE, "ratio": RATIO})
    argv = [str(CHILD), "--one", payload, str(run_dir / "result.json")]
    return run_child(argv, run_dir / "result.json", run_dir / "log.txt", child_env(),
                     python=str(venv_python()))


def make_beton(src: Path, out: Path, workers: int) -> None:
    """The images group's maker of the "ffcv" form: `out` (absent when this starts) holding
    the .beton, written by FFCV's own DatasetWriter in its venv. If the writer fails (an
    unreadable photo, say) or is still busy after WRITE_TIMEOUT_S, raises RuntimeError with
    its last word; none of its processes is left either way."""
    out.mkdir(parents=True)
    argv = [str(venv_python()), str(CHILD), "--write", str(src), str(out / ffcv_run.BETON),
            str(workers)]
    # A session of its own: the writer and its worker processes form one process group, which
    # a failing worker ends (PhotoFolder) and which is ended here whatever happened.
    with subprocess.Popen(argv, env={**os.environ, **child_env()}, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as proc:
        try:
            errors = proc.communicate(timeout=WRITE_TIMEOUT_S)[1]
        except subprocess.TimeoutExpired:
            errors = f"still busy after {WRITE_TIMEOUT_S} s"
        finally:
            end_group(proc.pid)
    if proc.returncode != 0:
        print(errors.rstrip(), file=sys.stderr)  # the whole story, for the form's log
        last = [line.strip() for line in errors.splitlines() if line.strip()][-1:]
        raise RuntimeError(f"{out / ffcv_run.BETON}: FFCV's writer failed (exit "
                           f"{proc.returncode})" + "".join(f": {line}" for line in last))


def end_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
