"""Writing OUT fails (disk full, no permission): one line, a clear exit status, and a full disk
leaves an output the same command resumes to exactly what an uninterrupted run writes."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

import datapipe.format.writer
from datapipe.format.manifest import Manifest
from preprocess.resume import JOURNAL_NAME, Journal
from tests.imagegen import make_image_folder, write_awkward_images
from tests.preprocess.helpers import unprivileged


def _disk_fills_at(call: int):
    """A stand-in that behaves as the real function until its `call`-th use, then fails the way
    a full disk does (after writing part of its temporary file, where it has one)."""
    def install(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> None:
        real = getattr(owner, name)
        calls = []

        def full(*args, **kwargs):
            calls.append(1)
            if len(calls) == call:
                for tmp in (Path(a) for a in args if str(a).endswith(".tmp")):
                    tmp.write_bytes(b"partial")
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, full)
    return install


WHERE = {  # where the disk fills: writing a shard, journalling one, writing the manifest
    "shard": (datapipe.format.writer, "ShardFile", 3),
    "journal": (Journal, "_append", 4),
    "manifest": (Manifest, "save", 1),
}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = make_image_folder(tmp_path_factory.mktemp("faults") / "src", classes=2, per_class=12)
    write_awkward_images(src / "class_1")
    return src


@pytest.mark.parametrize("fmt", ["arrow", "msgpack"])
@pytest.mark.parametrize("where", sorted(WHERE))
def test_disk_full_is_one_line_and_the_same_command_resumes(cli, tmp_path: Path, source: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            where: str, fmt: str) -> None:
    args = ["--short-side", 48, "--shard-size", "12KB", "--format", fmt, "--workers", 1]
    assert cli("convert", "images", source, tmp_path / "clean", *args).code == 0
    out = tmp_path / "out"
    owner, name, call = WHERE[where]
    with monkeypatch.context() as patch:
        _disk_fills_at(call)(patch, owner, name)
        full = cli("convert", "images", source, out, *args)
    assert full.code == 1, full.err
    assert "no space left on the device" in full.err and "rerun the same command" in full.err
    assert len(full.err.strip().splitlines()) == 1 and "Traceback" not in full.err
    assert not (out / "manifest.json").exists()

    rerun = cli("convert", "images", source, out, *args)  # space freed
    assert rerun.code == 0, rerun.err
    assert "kept from the interrupted run" in rerun.out
    clean = sorted(p.name for p in (tmp_path / "clean").iterdir())
    assert sorted(p.name for p in out.iterdir()) == clean
    for name in clean:
        assert (out / name).read_bytes() == (tmp_path / "clean" / name).read_bytes(), name


@pytest.mark.parametrize("what", ["new OUT in a read-only folder", "read-only OUT"])
def test_out_not_writable_is_one_line_exit_2(tmp_path: Path, what: str) -> None:
    src = make_image_folder(tmp_path / "src", classes=1, per_class=2)
    parent = tmp_path / "locked"
    parent.mkdir()
    out = parent / "out" if what.startswith("new") else parent
    prefix = unprivileged()
    parent.chmod(0o555)
    try:
        probe = None if prefix is None else subprocess.run(
            [*prefix, sys.executable, "-c", "import sys; open(sys.argv[1] + '/x', 'w')",
             str(parent)], capture_output=True, timeout=30)
        if probe is None or probe.returncode == 0:
            pytest.skip("cannot run a process that file permissions apply to")
        result = subprocess.run([*prefix, sys.executable, "-m", "datapipe.cli", "convert",
                                 "images", str(src), str(out)],
                                capture_output=True, text=True, timeout=120)
    finally:
        parent.chmod(0o755)
    assert result.returncode == 2, result.stderr
    assert f"OUT {out}" in result.stderr and "Permission denied" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert os.listdir(parent) == []


@pytest.mark.parametrize("journal", ["", '{"fingerp'])
def test_a_run_stopped_while_starting_its_journal_starts_afresh(cli, tmp_path: Path,
                                                                source: Path,
                                                                journal: str) -> None:
    # A full disk (or a kill) as the journal's first line is written: nothing was finished.
    out = tmp_path / "out"
    out.mkdir()
    (out / JOURNAL_NAME).write_text(journal)
    result = cli("convert", "images", source, out, "--short-side", 48)
    assert result.code == 0, result.err
    assert "kept from the interrupted run" not in result.out
    assert not (out / JOURNAL_NAME).exists() and (out / "manifest.json").exists()
