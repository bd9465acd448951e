"""One writer per OUT: a second `datapipe convert` into the same directory is refused, naming the
first; a killed run leaves no stale lock behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from datapipe.format.output_lock import LOCK_NAME
from preprocess.resume import JOURNAL_NAME
from tests.conftest import run_cli_process
from tests.imagegen import make_image_folder


def _args(src: Path, out: Path, *extra: object) -> list[str]:
    return ["convert", "images", str(src), str(out), "--short-side", "128", "--shard-size",
            "60KB", *map(str, extra)]


def _start_and_stop_after_a_shard(args: list[str], out: Path) -> subprocess.Popen:
    """A conversion frozen (SIGSTOP) mid-run, holding OUT: it cannot finish behind our back."""
    proc = subprocess.Popen([sys.executable, "-m", "datapipe.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    journal = out / JOURNAL_NAME
    while not (journal.exists() and len(journal.read_text().splitlines()) > 1):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"conversion ended before it could be stopped: {proc.stderr.read()!r}")
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGSTOP)
    _wait_stopped(proc.pid)
    return proc


def _wait_stopped(pid: int) -> None:
    """Until every thread of `pid` is stopped: the signal lands a moment after kill() returns,
    and the shard-writer thread may start the next shard in that moment."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            states = [(task / "stat").read_text().rsplit(")", 1)[1].split()[0]
                      for task in Path(f"/proc/{pid}/task").iterdir()]
        except OSError:  # a thread ended while being listed
            continue
        if all(state in "tT" for state in states):
            return
        time.sleep(0.001)
    pytest.fail(f"pid {pid} did not stop")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return make_image_folder(tmp_path / "src", classes=4, per_class=40, size=(320, 240))


def test_second_writer_is_refused_naming_the_running_one(tmp_path: Path, source: Path) -> None:
    out = tmp_path / "out"
    first = _start_and_stop_after_a_shard(_args(source, out, "--workers", 1), out)
    try:
        before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
        for extra in ([], ["--overwrite", "--quality", "50"]):
            second = run_cli_process(*_args(source, out, "--workers", 1, *extra), timeout=60)
            assert second.returncode == 2, second.stderr
            assert "being written by another datapipe convert" in second.stderr
            assert f"pid {first.pid} on {socket.gethostname()}, started " in second.stderr
            assert len(second.stderr.strip().splitlines()) == 1, second.stderr
        assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    finally:
        os.kill(first.pid, signal.SIGCONT)
    assert first.wait(timeout=120) == 0, first.stderr.read()
    assert not (out / LOCK_NAME).exists()

    clean = tmp_path / "clean"
    assert run_cli_process(*_args(source, clean, "--workers", 1)).returncode == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in clean.iterdir())
    for path in clean.iterdir():
        assert (out / path.name).read_bytes() == path.read_bytes(), path.name


def test_a_killed_run_leaves_no_lock_even_while_its_workers_live(tmp_path: Path,
                                                                  source: Path) -> None:
    out = tmp_path / "out"
    args = _args(source, out, "--workers", 2)
    first = _start_and_stop_after_a_shard(args, out)
    workers = _children(first.pid)
    assert workers, "the conversion should have worker processes"
    try:
        for pid in workers:  # a worker outliving its killed parent, as a slow one can
            os.kill(pid, signal.SIGSTOP)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
        assert (out / LOCK_NAME).exists()  # left behind, but no longer locked
        rerun = run_cli_process(*args, timeout=120)
    finally:
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
    assert rerun.returncode == 0, rerun.stderr
    assert "kept from the interrupted run" in rerun.stdout
    assert not (out / LOCK_NAME).exists()
