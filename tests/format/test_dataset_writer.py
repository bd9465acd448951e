"""dp.DatasetWriter: every column type written and read back, the very shard bytes the
converters write, atomic publication, the destination's rules, and what an abandoned or killed
write leaves (no dataset, no shard)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import numpy as np
import pytest

import datapipe as dp
from datapipe.errors import ArgumentError
from datapipe.format.hashing import hash_file
from datapipe.format.manifest import MANIFEST_NAME
from datapipe.format.output_lock import LOCK_NAME
from datapipe.inspection import verify
from tests.conftest import convert, run_cli_process
from tests.imagegen import jpeg_bytes, make_image_folder, noise_image
from tests.integration.test_disk_full import _namespace
from tests.preprocess.helpers import unprivileged
from tests.s3server import list_keys

COLUMNS = {"image": "jpeg", "label": "int64", "score": "float32", "caption": "string",
           "blob": "bytes", "embedding": "float32[3]", "patch": "uint8[2,2,3]",
           "ids": "int32[]", "big": "uint64", "small": "int8"}


def sample(i: int) -> dict:
    return {"image": jpeg_bytes(noise_image(24 + i % 3, 16, seed=i)), "label": i % 4,
            "score": i / 8, "caption": f"photo {i} é", "blob": bytes([i]) * (i % 5),
            "embedding": np.array([i, -i, 0.5], np.float32),
            "patch": np.full((2, 2, 3), i, np.uint8), "ids": list(range(-i, 0)),
            "big": 2**64 - 1 - i, "small": -i}


def _plain(value: object) -> object:
    return value.tolist() if isinstance(value, np.ndarray | np.generic) else value


def assert_same_sample(read: dict, i: int) -> None:
    written = sample(i)
    assert bytes(read["image"]) == written["image"]
    assert (read["height"], read["width"]) == (16, 24 + i % 3)  # from the JPEG header
    for name in ("label", "caption", "big", "small"):
        assert read[name] == written[name], name
    assert read["score"] == pytest.approx(written["score"])
    assert bytes(read["blob"]) == written["blob"]
    np.testing.assert_array_equal(read["embedding"], written["embedding"])
    assert read["patch"].shape == (2, 2, 3) and read["patch"].dtype == np.uint8
    np.testing.assert_array_equal(read["patch"], written["patch"])
    np.testing.assert_array_equal(read["ids"], np.array(written["ids"], np.int32))


@pytest.mark.parametrize("fmt", ["arrow", "msgpack"])
def test_every_column_type_comes_back_as_written(tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "out"
    with dp.DatasetWriter(out, COLUMNS, shard_format=fmt, shard_size="6KB") as writer:
        writer.write(sample(0))
        assert writer.write_all(sample(i) for i in range(1, 30)) == 29
    manifest = writer.manifest
    assert manifest is not None and manifest.num_samples == 30 and len(manifest.shards) > 2
    assert manifest.kind == "images" and manifest.settings["encoding"] == "jpeg"
    assert [c.name for c in manifest.columns][:4] == ["image", "label", "height", "width"]
    for shard in manifest.shards:  # hashed as written, renamed into place whole
        assert hash_file(out / shard.name) == shard.hash
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [MANIFEST_NAME, *(s.name for s in manifest.shards)])  # no lock, no temporary file
    with dp.Dataset(out) as ds:
        assert len(ds) == 30
        for i, read in enumerate(ds):
            assert_same_sample(read, i)
        assert_same_sample(ds[17], 17)
        assert ds.cells("patch", [3, 4]).shape == (2, 2, 2, 3)
        # Read a shard at a time: values in the order asked, across shards and repeated.
        picked = [29, 0, 14, 3, 29, 7, 22, 1]
        for name in ("caption", "label", "score", "ids", "big"):
            assert list(map(_plain, ds.cells(name, picked))) == \
                [_plain(ds[i][name]) for i in picked], name
        np.testing.assert_array_equal(ds.cells("small", [5, 6]), np.array([-5, -6], np.int8))
    assert verify(out)[1] == []


@pytest.mark.parametrize("fmt", ["arrow", "msgpack"])
def test_a_float_reads_back_as_its_column_stores_it(tmp_path: Path, fmt: str) -> None:
    """0.1 in a float32 column is float32's 0.1, whether read by row or by column: a msgpack
    row keeps the value beside the typed column, rounded as the column is."""
    with dp.DatasetWriter(tmp_path / "out", {"single": "float32", "half": "float16"},
                          shard_format=fmt) as writer:
        writer.write({"single": 0.1, "half": 1 / 3})
    with dp.Dataset(tmp_path / "out") as ds:
        row = ds[0]
        assert row["single"] == float(np.float32(0.1)) == ds.cells("single", [0])[0]
        assert row["half"] == float(np.float16(1 / 3)) == ds.cells("half", [0])[0]


def test_the_same_samples_make_the_shard_bytes_the_converter_makes(tmp_path: Path) -> None:
    """One writer, not two: a converted dataset's samples written again through
    DatasetWriter give byte-identical shards, in both formats."""
    src = make_image_folder(tmp_path / "src", classes=3, per_class=8)
    for fmt in ("arrow", "msgpack"):
        converted = tmp_path / f"converted-{fmt}"
        convert("images", src, converted, "--short-side", "40", "--shard-size", "12KB",
                "--workers", "1", "--format", fmt)
        with dp.Dataset(converted) as ds:
            m = ds.manifest
            with dp.DatasetWriter(tmp_path / f"written-{fmt}", {"image": "jpeg",
                                  "label": "int64", "path": "string"}, shard_format=fmt,
                                  shard_size="12KB", classes=m.classes) as writer:
                for s in ds:
                    writer.write({"image": s["image"].tobytes(), "label": s["label"],
                                  "path": s["path"]})
        assert len(m.shards) > 2
        assert writer.manifest.columns == m.columns
        assert writer.manifest.shards == m.shards  # names, rows, bytes and hashes


def test_an_exception_in_the_block_leaves_no_dataset_and_removes_finished_shards(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="stop"), \
            dp.DatasetWriter(out, {"blob": "bytes"}, shard_size="1KB") as writer:
        writer.write_all({"blob": bytes(100)} for _ in range(600))
        # Samples reach the shard writer 256 at a time: shards of the first ones are finished
        # and renamed into place by now.
        assert sum(p.suffix == ".arrow" for p in out.iterdir()) > 10
        raise RuntimeError("stop")
    assert list(out.iterdir()) == []  # no manifest, no shard, no lock
    with pytest.raises(ArgumentError, match="closed"):
        writer.write({"blob": b""})
    with pytest.raises(dp.DataError, match="missing"):
        dp.Dataset(out)
    with dp.DatasetWriter(out, {"blob": "bytes"}) as again:  # the folder takes a new write
        again.write({"blob": b"x"})
    assert dp.Dataset(out)[0]["blob"].tobytes() == b"x"


def test_a_killed_writer_leaves_no_dataset_and_the_next_write_takes_the_folder(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    script = textwrap.dedent(f"""
        import os, signal, datapipe as dp
        w = dp.DatasetWriter({str(out)!r}, {{"blob": "bytes"}}, shard_size="1KB")
        for i in range(600):
            w.write({{"blob": bytes(200)}})
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == -9, proc.stderr
    left = sorted(p.name for p in out.iterdir())
    assert MANIFEST_NAME not in left and any(n.startswith("shard-") for n in left)
    with pytest.raises(dp.DataError, match="missing"):
        dp.Dataset(out)
    with dp.DatasetWriter(out, {"blob": "bytes"}, shard_size="1KB") as writer:
        writer.write({"blob": b"new"})
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST_NAME, "shard-00000.arrow"]
    assert len(dp.Dataset(out)) == 1


def test_closing_returns_the_manifest_once_written_and_writing_after_close_is_refused(
        tmp_path: Path) -> None:
    writer = dp.DatasetWriter(tmp_path / "out", {"n": "int64"})
    assert writer.manifest is None
    writer.write({"n": 1})
    manifest = writer.close()
    assert writer.close() is manifest and writer.manifest is manifest
    with pytest.raises(ArgumentError, match=r"closed; open another"):
        writer.write({"n": 2})
    assert dp.Dataset(tmp_path / "out").manifest.num_samples == 1


def test_a_written_sample_is_copied_and_not_kept(tmp_path: Path) -> None:
    """write() copies a sample's cells into the shard writer's buffers before it returns: a
    writer holding on to samples until their chunk is written keeps tens of megabytes alive,
    memory the allocator hands back and takes afresh chunk after chunk."""
    with dp.DatasetWriter(tmp_path / "out", {"blob": "bytes", "ids": "uint16[]"}) as writer:
        for i in range(3):
            blob, ids = bytes([i]) * 1000, np.arange(i + 5, dtype=np.uint16)
            references, ids_alive = sys.getrefcount(blob), weakref.ref(ids)
            writer.write({"blob": blob, "ids": ids})
            assert sys.getrefcount(blob) == references
            del ids
            assert ids_alive() is None
    with dp.Dataset(tmp_path / "out") as ds:
        assert [bytes(ds[i]["blob"]) for i in range(3)] == [bytes([i]) * 1000 for i in range(3)]
        assert [ds[i]["ids"].tolist() for i in range(3)] == [list(range(i + 5))
                                                             for i in range(3)]


def test_a_refused_sample_is_not_written_and_the_writer_goes_on(tmp_path: Path) -> None:
    with dp.DatasetWriter(tmp_path / "out", {"n": "int64", "s": "string"}) as writer:
        writer.write({"n": 0, "s": "a"})
        with pytest.raises(dp.DataError, match=r"sample 1, column 'n'"):
            writer.write({"n": "one", "s": "b"})
        writer.write({"n": 2, "s": "c"})
        with pytest.raises(dp.DataError, match=r"sample 3, column 's'"):  # as given, not kept
            writer.write({"n": 3, "s": None})
        assert writer.samples_written == 2
    with dp.Dataset(tmp_path / "out") as ds:
        assert [ds[i]["n"] for i in range(len(ds))] == [0, 2]


def test_a_folder_holding_a_dataset_is_refused_unless_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with dp.DatasetWriter(out, {"n": "int64"}) as writer:
        writer.write({"n": 1})
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ArgumentError, match=r"already holds a finished dataset; pass "
                                            r"overwrite=True") as refused:
        dp.DatasetWriter(out, {"n": "int64"})
    assert "\n" not in str(refused.value)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # untouched
    with dp.DatasetWriter(out, {"s": "string"}, overwrite=True) as writer:
        writer.write({"s": "replaced"})
    assert dp.Dataset(out)[0] == {"s": "replaced"}


def test_folders_the_writer_must_not_take(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ArgumentError, match="holds files datapipe did not write"):
        dp.DatasetWriter(foreign, {"n": "int64"}, overwrite=True)
    assert (foreign / "notes.txt").read_text() == "mine"
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(ArgumentError, match="exists and is not a directory"):
        dp.DatasetWriter(a_file, {"n": "int64"})


def test_one_writer_at_a_time_and_none_beside_a_conversion(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = dp.DatasetWriter(out, {"n": "int64"})
    try:
        with pytest.raises(ArgumentError, match=r"is being written by another DatasetWriter "
                                                r"\(pid"):
            dp.DatasetWriter(out, {"n": "int64"}, overwrite=True)
        src = make_image_folder(tmp_path / "src", classes=1, per_class=2)
        proc = run_cli_process("convert", "images", src, out, "--overwrite", timeout=120)
        assert proc.returncode == 2 and "being written by another DatasetWriter" in proc.stderr
    finally:
        first.close()
    assert not (out / LOCK_NAME).exists()


def test_a_conversion_in_progress_is_not_taken_over(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / ".datapipe-convert.jsonl").write_text('{"fingerprint": "x"}\n')
    with pytest.raises(ArgumentError, match="holds a conversion in progress"):
        dp.DatasetWriter(out, {"n": "int64"})
    assert (out / ".datapipe-convert.jsonl").exists()


def test_an_unwritable_folder_is_one_line(tmp_path: Path) -> None:
    parent = tmp_path / "locked"
    parent.mkdir()
    script = ("import sys, datapipe as dp\n"
              "try:\n    dp.DatasetWriter(sys.argv[1], {'n': 'int64'})\n"
              "except dp.DatapipeError as exc:\n    print(exc); sys.exit(2)")
    prefix = unprivileged()
    parent.chmod(0o555)
    try:
        probe = None if prefix is None else subprocess.run(
            [*prefix, sys.executable, "-c", "import sys; open(sys.argv[1] + '/x', 'w')",
             str(parent)], capture_output=True, timeout=30)
        if probe is None or probe.returncode == 0:
            pytest.skip("cannot run a process that file permissions apply to")
        result = subprocess.run([*prefix, sys.executable, "-c", script, str(parent / "out")],
                                capture_output=True, text=True, timeout=60)
    finally:
        parent.chmod(0o755)
    assert result.returncode == 2, result.stderr
    assert result.stdout.strip() == (f"DatasetWriter out {parent / 'out'} is not writable "
                                     "(out): Permission denied")


def test_writes_to_s3_with_the_manifest_last_and_nothing_when_abandoned(
        s3_bucket: str, tmp_path: Path) -> None:
    url = f"{s3_bucket}/written"
    with dp.DatasetWriter(url, {"n": "int64", "v": "float64[2]"}, shard_size="200B",
                          staging=tmp_path / "staging") as writer:
        writer.write_all({"n": i, "v": [i, i]} for i in range(20))
    assert MANIFEST_NAME in list_keys(url) and len(writer.manifest.shards) > 2
    assert not (tmp_path / "staging").exists()  # emptied, then removed
    with dp.Dataset(url) as ds:
        assert [ds[i]["n"] for i in range(len(ds))] == list(range(20))
    abandoned = f"{s3_bucket}/abandoned"
    with pytest.raises(RuntimeError), dp.DatasetWriter(abandoned, {"n": "int64"},
                                                       shard_size="100B") as writer:
        writer.write_all({"n": i} for i in range(50))
        raise RuntimeError("stop")
    assert list_keys(abandoned) == []  # nothing is sent before close
    with pytest.raises(ArgumentError, match="already holds a finished dataset"):
        dp.DatasetWriter(url, {"n": "int64"})


FULL_DISK = """
set -u
mount -t tmpfs -o size=2m datapipe-test "$MNT" || exit 97
"$PY" -c "$WRITE" "$MNT/out" > "$LOG/out" 2> "$LOG/err"
echo $? > "$LOG/rc"
ls -A "$MNT/out" > "$LOG/left"
"""
WRITE_4MB = """
import sys, datapipe as dp
try:
    with dp.DatasetWriter(sys.argv[1], {"blob": "bytes"}, shard_size="256KB") as writer:
        writer.write_all({"blob": bytes(100_000)} for _ in range(40))
except dp.DatapipeError as exc:
    print(exc)
    sys.exit(1)
"""


def test_a_full_disk_is_one_line_and_leaves_no_dataset_nor_shard(tmp_path: Path) -> None:
    prefix = _namespace()
    if prefix is None:
        pytest.skip("no permission to mount a tmpfs in a private mount namespace")
    mnt, log = tmp_path / "mnt", tmp_path / "log"
    mnt.mkdir()
    log.mkdir()
    env = [f"MNT={mnt}", f"LOG={log}", f"PY={sys.executable}", f"WRITE={WRITE_4MB}"]
    run = subprocess.run([*prefix, "env", *env, "sh", "-c", FULL_DISK], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert (log / "rc").read_text().strip() == "1", (log / "err").read_text()
    message = (log / "out").read_text().strip()
    assert message.startswith(f"DatasetWriter out {mnt / 'out'}: no space left on the device")
    assert message.endswith("free some and write the dataset again") and "\n" not in message
    assert (log / "left").read_text() == ""  # no manifest, no shard, no temporary file


def test_a_shard_written_in_many_pieces_hashes_as_its_file(tmp_path: Path) -> None:
    blobs = [np.random.default_rng(i).bytes(3_000_001) for i in range(4)]  # 12 MB, one batch
    with dp.DatasetWriter(tmp_path / "out", {"blob": "bytes"}) as writer:
        writer.write_all({"blob": b} for b in blobs)
    (shard,) = writer.manifest.shards
    assert hash_file(tmp_path / "out" / shard.name) == shard.hash
    assert [dp.Dataset(tmp_path / "out")[i]["blob"].tobytes() for i in range(4)] == blobs
