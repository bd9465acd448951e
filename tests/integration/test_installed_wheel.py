"""The installed package stands alone: a wheel of this checkout, installed into a fresh venv and
run from an empty folder, runs the benchmark suite (its photos, fixtures and peers' children
all inside the package), with no checkout on its path.

The venv borrows its requirements (torch, pyarrow, ...) from the test environment's
site-packages through a path file, so the test needs no network; datapipe itself comes from
the wheel alone."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(argv: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with this checkout's wheel installed; its bin folder."""
    root = tmp_path_factory.mktemp("wheel")
    built = run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps",
                 "--no-build-isolation", "-q", "-w", str(root / "dist")], root)
    assert built.returncode == 0, built.stderr
    (wheel,) = (root / "dist").glob("datapipe-*.whl")
    venv.create(root / "venv", with_pip=False)
    python = root / "venv" / "bin" / "python"
    target = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                 root).stdout.strip()
    borrowed = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (Path(target) / "requirements-from-tests.pth").write_text("\n".join(borrowed) + "\n")
    done = run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                "-q", str(wheel)], root)
    assert done.returncode == 0, done.stderr
    return root / "venv" / "bin"


@pytest.mark.slow
def test_the_wheel_holds_the_package_and_its_fast_path(installed: Path, tmp_path: Path) -> None:
    probe = run([str(installed / "python"), "-c",
                 "import datapipe, datapipe.suite, datapipe.image.cpu_decode as d; "
                 "print(datapipe.__file__); print(d.EXTENSION_ACTIVE)"], tmp_path)
    assert probe.returncode == 0, probe.stderr
    where, active = probe.stdout.split()
    assert Path(where).is_relative_to(installed.parent) and active == "True"


@pytest.mark.slow
def test_the_suite_runs_from_an_empty_folder(installed: Path, tmp_path: Path) -> None:
    empty = tmp_path / "anywhere"
    empty.mkdir()
    result = run([str(installed / "datapipe"), "bench", "--suite", "images", "--smoke",
                  "--skip", "dali,datapipe-dali,litdata,ffcv"], empty)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    data = json.loads((empty / "bench-results" / "suite.json").read_text())
    entries = {e["name"]: e for e in data["suites"]["images"][0]["entries"]}
    for name in ("torch", "webdataset", "datapipe", "ceiling"):
        assert entries[name]["status"] == "ok" and entries[name]["median"] > 0, entries[name]
    assert (empty / "bench-data" / "photos-64" / ".complete").is_file()
    assert "(installed)" in data["machine"]["revision"]  # not a checkout's commit
    assert (empty / "bench-results" / "images.png").is_file()
