"""torchvision, timm and MosaicML Streaming as peers, run in a venv of their own.

To install them, run `bash tools/setup_vision.sh` once in a checkout (it makes .venv-vision);
the suite looks for that venv in $DATAPIPE_VISION_VENV, else ./.venv-vision, else beside the
checkout datapipe runs from. Without it their peers report "not installed" with that hint.

torchvision's wheel is built against the registry's own torch and fails to import beside the
CPU build of the main venv; timm and Streaming's MDSWriter need torchvision. So their runs are
children under that venv's python: either a script of datapipe/suite/isolated run by its path,
importing nothing of datapipe (the peers themselves), or datapipe's own suite child with this
checkout on PYTHONPATH (datapipe running a user's torchvision transforms; nothing of datapipe
is installed in that venv).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from datapipe.suite.runner import CHILD_ENV, CODE_ENV, Peer, Record, run_child
from datapipe.suite.venvs import CHECKOUT, Venv

VENV = Venv(".venv-vision", "DATAPIPE_VISION_VENV", ".vision-setup-1", "tools/setup_vision.sh")
NOT_INSTALLED = f"not installed ({VENV.hint})"
VERSIONS = ("torchvision", "timm", "mosaicml-streaming")  # reported beside the machine's


def isolated_env() -> dict[str, str]:
    # Nothing from the calling venv's path: the venv has its own torch and PIL.
    return {**CHILD_ENV, "PYTHONPATH": "", "TQDM_DISABLE": "1"}


def run_isolated(script: Path, job: dict[str, Any], run_dir: Path) -> Record:
    """One run of `script --one JOB RESULT` in a fresh process of the venv."""
    argv = [str(script), "--one", json.dumps(job), str(run_dir / "result.json")]
    return run_child(argv, run_dir / "result.json", run_dir / "log.txt", isolated_env(),
                     python=str(VENV.python()))


def run_datapipe(group: str, peer: Peer, job: dict[str, Any], run_dir: Path) -> Record:
    """One run of datapipe's own suite child (`python -m datapipe.suite.child`) in a fresh
    process of the venv, with the datapipe running now importable there (and a --before
    peer's own checkout, which the child then loads instead)."""
    argv = ["-m", "datapipe.suite.child", group, peer.name, json.dumps(job),
            str(run_dir / "result.json")]
    return run_child(argv, run_dir / "result.json", run_dir / "log.txt",
                     {**isolated_env(), "PYTHONPATH": str(packages_only(run_dir / "code")),
                      **({CODE_ENV: peer.code} if peer.code else {})},
                     python=str(VENV.python()))


def packages_only(folder: Path) -> Path:
    """`folder`, holding links to the datapipe and preprocess packages running now and
    nothing else: where those sit in an installed wheel's site-packages, putting that on the
    venv's path would bring this environment's torch in with them."""
    folder.mkdir(parents=True, exist_ok=True)
    for package in ("datapipe", "preprocess"):
        if not (folder / package).exists():
            (folder / package).symlink_to(CHECKOUT / package, target_is_directory=True)
    return folder


def versions() -> dict[str, str | None]:
    """The peers' versions in the venv, and its torch's (not the main venv's)."""
    return {**{dist: VENV.version(dist) for dist in VERSIONS},
            f"torch ({VENV.name})": VENV.version("torch")}
