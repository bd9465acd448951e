"""A conversion onto a real file system that fills up: one line and exit 1, then, once space is
freed, the same command resumes to exactly what an uninterrupted run writes.

The small file system is a tmpfs mounted in a private mount namespace (`unshare`), so nothing
is mounted outside the test's own processes; where that is not permitted the test skips.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli_process
from tests.imagegen import make_image_folder

SCRIPT = """
set -u
mount -t tmpfs -o size=4m datapipe-test "$MNT" || exit 97
head -c 3145728 /dev/zero > "$MNT/filler"  # leaves about 1 MB: the run needs about 2.3 MB
"$PY" -m datapipe.cli "$@" "$MNT/out" > "$LOG/first.out" 2> "$LOG/first.err"
echo $? > "$LOG/first.rc"
rm "$MNT/filler"
"$PY" -m datapipe.cli "$@" "$MNT/out" > "$LOG/second.out" 2> "$LOG/second.err"
echo $? > "$LOG/second.rc"
cp -r "$MNT/out" "$KEEP"
"""


def _namespace() -> list[str] | None:
    """A command prefix giving a private mount namespace we may mount a tmpfs in, or None."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    for prefix in ([unshare, "--mount"], [unshare, "--mount", "--map-root-user"]):
        probe = subprocess.run([*prefix, "sh", "-c", "mount -t tmpfs -o size=1m t /mnt"],
                               capture_output=True, timeout=30)
        if probe.returncode == 0:
            return prefix
    return None


def test_real_disk_full_then_resume_gives_identical_output(tmp_path: Path) -> None:
    prefix = _namespace()
    if prefix is None:
        pytest.skip("no permission to mount a tmpfs in a private mount namespace")
    src = make_image_folder(tmp_path / "src", classes=4, per_class=40, size=(320, 240))
    args = ["convert", "images", str(src), "--short-side", "128", "--shard-size", "60KB",
            "--workers", "2"]
    mnt, log = tmp_path / "mnt", tmp_path / "log"
    mnt.mkdir()
    log.mkdir()
    env_vars = [f"MNT={mnt}", f"LOG={log}", f"KEEP={tmp_path / 'kept'}", f"PY={sys.executable}"]
    run = subprocess.run([*prefix, "env", *env_vars, "sh", "-c", SCRIPT, "sh", *args],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr

    first_err = (log / "first.err").read_text()
    assert (log / "first.rc").read_text().strip() == "1", first_err
    assert "no space left on the device" in first_err and "Traceback" not in first_err
    assert len(first_err.strip().splitlines()) == 1, first_err
    assert (log / "second.rc").read_text().strip() == "0", (log / "second.err").read_text()
    assert "kept from the interrupted run" in (log / "second.out").read_text()

    clean = tmp_path / "clean"
    assert run_cli_process(*args, clean).returncode == 0
    kept = tmp_path / "kept"
    assert sorted(p.name for p in kept.iterdir()) == sorted(p.name for p in clean.iterdir())
    for path in clean.iterdir():
        assert (kept / path.name).read_bytes() == path.read_bytes(), path.name
