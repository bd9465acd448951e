"""A shard that passed its cheap checks is not checked again by the next process opening the
same unchanged file: a marker under .datapipe-checked/ vouches for it (check_marks.py).

Shown with real damage made after the marker, in place, keeping the file's size and mtime:
a fresh process (`datapipe inspect`) no longer sees it, and it does again as soon as the file's
stamp changes, or the marker is from other checks or another manifest."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from datapipe.errors import DataError
from datapipe.format import Dataset, check_marks
from tests.conftest import convert, run_cli_process
from tests.format import flips
from tests.imagegen import make_image_folder

FORMATS = ["arrow", "msgpack"]
MARKS = ".datapipe-checked"


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """60 documents of byte tokens over several shards, in both formats."""
    root = tmp_path_factory.mktemp("texts")
    lines = [f"document {i} " + "word " * (i % 9) for i in range(60)]
    (root / "a.txt").write_text("\n".join(lines) + "\n")
    for fmt in FORMATS:
        convert("text", root / "a.txt", root / fmt, "--tokenizer", "bytes", "--append-eos",
                "--shard-size", "1KB", "--format", fmt)
    return {fmt: root / fmt for fmt in FORMATS}


@pytest.fixture(autouse=True)
def _nothing_checked_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts as a fresh process tree would: no stamp checked in memory."""
    monkeypatch.setattr(check_marks, "_checked", set())


def _dataset(source: Path, target: Path) -> Path:
    """A copy of `source` whose shards were written an hour ago: a file is marked only once
    its mtime is older than the file system clock's tick."""
    flips.copy_dataset(source, target)
    an_hour_ago = time.time_ns() - 3600 * 10**9
    for shard in target.glob("shard-*"):
        os.utime(shard, ns=(an_hour_ago, an_hour_ago))
    return target


def _second_shard(directory: Path) -> tuple[Path, int]:
    manifest = json.loads((directory / "manifest.json").read_text())
    return directory / manifest["shards"][1]["name"], manifest["shards"][0]["rows"]


def _damage_keeping_stamp(shard: Path) -> tuple[int, str]:
    """Damage that an index check finds, made in place with the file's size and mtime kept:
    (the row, what the check says)."""
    before = shard.stat()
    if shard.suffix == ".arrow":
        flips.xor_byte(shard, flips.arrow_scalar_position(shard, "length", 1), 0x04)
        found = 1, "its length column says"
    else:
        footer, _ = flips.msgpack_footer(shard)
        at = flips.msgpack_value_position(shard, "offsets", footer["offsets"])
        flips.xor_byte(shard, at + 8 * 2 + 1, 0x40)  # record 2 starts 16 KB later
        found = 2, "record offsets out of order"
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = shard.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    return found


def _inspect(directory: Path) -> tuple[int, str]:
    """`datapipe inspect` in a fresh process (it opens every shard): exit code, stderr."""
    done = run_cli_process("inspect", directory)
    return done.returncode, done.stderr


def _expect_caught(directory: Path, shard: Path, sample: int, row: int, says: str) -> None:
    code, err = _inspect(directory)
    assert code == 1, err
    assert f"{shard} row {row} (sample {sample}): " in err and says in err, err
    assert "Traceback" not in err


def _markers(directory: Path) -> list[Path]:
    return sorted((directory / MARKS).iterdir()) if (directory / MARKS).is_dir() else []


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_next_process_skips_the_checks_until_the_file_changes(
        texts: dict[str, Path], tmp_path: Path, cli, fmt: str) -> None:
    out = _dataset(texts[fmt], tmp_path / "ds")
    assert _inspect(out)[0] == 0
    shards = len(json.loads((out / "manifest.json").read_text())["shards"])
    assert len(_markers(out)) == shards
    shard, first = _second_shard(out)
    row, says = _damage_keeping_stamp(shard)
    assert _inspect(out) == (0, "")  # the marker vouches for the file: its rows are not read
    verified = cli("verify", out)  # hashes, whatever the markers say
    assert verified.code == 1 and f"{shard}: content hash differs" in verified.err
    mtime = shard.stat().st_mtime_ns
    os.utime(shard, ns=(mtime, mtime - 10**9))  # touched: another stamp
    _expect_caught(out, shard, first + row, row, says)


def test_a_file_of_another_size_is_checked_again(texts: dict[str, Path],
                                                  tmp_path: Path) -> None:
    """The damaged shard written again with a longer schema (same rows, same columns) and its
    mtime set back: only its size tells it from the file the marker vouches for."""
    out = _dataset(texts["arrow"], tmp_path / "ds")
    assert _inspect(out)[0] == 0
    shard, first = _second_shard(out)
    row, says = _damage_keeping_stamp(shard)
    assert _inspect(out) == (0, "")  # the marker vouches for the file
    before = shard.stat()
    table = pa.ipc.open_file(pa.BufferReader(shard.read_bytes())).read_all()  # not a map
    table = table.replace_schema_metadata({"note": "x" * 64})
    with pa.OSFile(str(shard), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert shard.stat().st_size != before.st_size
    _expect_caught(out, shard, first + row, row, says)


def test_a_marker_of_other_checks_is_ignored(texts: dict[str, Path], tmp_path: Path) -> None:
    """A marker an older datapipe wrote (another CHECKS_VERSION) vouches for nothing."""
    out = _dataset(texts["arrow"], tmp_path / "ds")
    assert _inspect(out)[0] == 0
    shard, first = _second_shard(out)
    row, says = _damage_keeping_stamp(shard)
    assert _inspect(out) == (0, "")  # the marker vouches for the file
    for marker in _markers(out):
        saved = json.loads(marker.read_text())
        marker.write_text(json.dumps({**saved, "version": saved["version"] - 1}))
    _expect_caught(out, shard, first + row, row, says)


def test_a_marker_under_another_manifest_is_ignored(tmp_path: Path) -> None:
    """Shards checked against 3 classes, then the manifest edited to 2: the labels of the
    third are out of range, and the loaders must say so, as before there were markers."""
    src = make_image_folder(tmp_path / "src", classes=3, per_class=3, size=(40, 32))
    convert("images", src, tmp_path / "made", "--short-side", "32", "--shard-size", "4KB",
            "--workers", "1")
    out = _dataset(tmp_path / "made", tmp_path / "ds")
    assert _inspect(out)[0] == 0 and _markers(out)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["classes"] = manifest["classes"][:-1]
    (out / "manifest.json").write_text(json.dumps(manifest))
    code, err = _inspect(out)
    assert code == 1 and "is not one of the manifest's 2 classes" in err, err


def test_a_side_directory_that_cannot_be_written(texts: dict[str, Path],
                                                 tmp_path: Path) -> None:
    """Where no marker can be written (the dataset's folder read-only, and a file where the
    markers' folder would go, which stops root too), the dataset opens, and each process
    checks its shards: damage made after the first open is caught, where a writable twin's
    marker vouches for it."""
    twin = _dataset(texts["arrow"], tmp_path / "twin")
    out = _dataset(texts["arrow"], tmp_path / "ds")
    (out / MARKS).write_text("")
    out.chmod(0o555)
    try:
        assert _inspect(twin)[0] == 0 and _inspect(out)[0] == 0
        assert (out / MARKS).is_file() and _markers(twin)
        for directory in (twin, out):
            row, says = _damage_keeping_stamp(_second_shard(directory)[0])
        assert _inspect(twin) == (0, "")
        shard, first = _second_shard(out)
        _expect_caught(out, shard, first + row, row, says)
    finally:
        out.chmod(0o755)


def test_a_file_is_marked_once_its_mtime_is_older_than_a_clock_tick(
        texts: dict[str, Path], tmp_path: Path) -> None:
    """A file written just now could be written again within the same tick of the file
    system's clock, keeping its stamp: it is checked, not marked, until it has settled."""
    out = _dataset(texts["arrow"], tmp_path / "ds")
    shard, _ = _second_shard(out)
    os.utime(shard)  # written just now
    with Dataset(out) as ds:
        ds.scalar("length")  # opens every shard
    names = {json.loads(m.read_text())["shard"] for m in _markers(out)}
    assert shard.name not in names and len(names) == len(list(out.glob("shard-*"))) - 1
    settled = time.time_ns() - 10 * 10**9
    os.utime(shard, ns=(settled, settled))
    with Dataset(out) as ds:
        ds.scalar("length")
    assert shard.name in {json.loads(m.read_text())["shard"] for m in _markers(out)}


def _open_every_shard(directory: str) -> None:
    try:
        with Dataset(directory) as ds:
            ds.scalar("length")
    except DataError:
        os._exit(3)


def test_forked_processes_inherit_what_their_parent_checked(texts: dict[str, Path],
                                                            tmp_path: Path) -> None:
    """Loader workers are forked: the stamps checked before the fork are known to them without
    a marker (here none is left on disk)."""
    out = _dataset(texts["arrow"], tmp_path / "ds")
    shard, _ = _second_shard(out)
    with Dataset(out) as ds:
        ds.scalar("length")
    for marker in _markers(out):
        marker.unlink()
    _damage_keeping_stamp(shard)
    child = multiprocessing.get_context("fork").Process(target=_open_every_shard,
                                                        args=(str(out),))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    check_marks._checked.clear()  # a process that did not inherit them checks the file
    with Dataset(out) as ds, pytest.raises(DataError, match="its length column says"):
        ds.scalar("length")
