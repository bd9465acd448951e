"""One dataset written by several processes: DatasetWriter(part=i, parts=N) in each, then
merge_parts. The merge moves no shard byte, refuses while a part is missing or still writing,
and a part written again (a retried task) replaces its first attempt."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import datapipe as dp
from datapipe.errors import ArgumentError, DataError
from datapipe.format.manifest import MANIFEST_NAME
from datapipe.inspection import verify

COLUMNS = {"n": "int64", "vec": "float32[2]", "name": "string"}


def write_part(out: str, part: int, parts: int, count: int = 25, **options: object) -> None:
    with dp.DatasetWriter(out, COLUMNS, part=part, parts=parts, shard_size="300B",
                          **options) as writer:
        for i in range(count):
            n = part * 1000 + i
            writer.write({"n": n, "vec": [n, -n], "name": f"part {part}"})


def numbers(out: str | Path) -> list[int]:
    with dp.Dataset(out) as ds:
        return ds.cells("n", np.arange(len(ds))).tolist()


def expected(parts: int, count: int = 25) -> list[int]:
    return [p * 1000 + i for p in range(parts) for i in range(count)]


def test_parts_written_by_processes_merge_into_one_dataset_without_moving_a_byte(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.starmap(write_part, [(str(out), part, 3) for part in range(3)])
    shards = sorted(p for p in out.iterdir() if p.name.startswith("shard-"))
    assert len(shards) >= 6 and all(p.name.startswith("shard-part0000") for p in shards)
    inodes = {p.name: p.stat().st_ino for p in shards}
    # Not a dataset until merged, and the reader says how to make it one.
    with pytest.raises(DataError, match=r"holds 3 finished parts of a parallel write .*"
                                        r"datapipe\.merge_parts\("):
        dp.Dataset(out)
    manifest = dp.merge_parts(out)
    assert manifest.num_samples == 75 and manifest.stats["parts"] == 3
    assert {p.name: p.stat().st_ino for p in out.iterdir() if p.name.startswith("shard-")} \
        == inodes  # the same files, where they were written
    assert sorted(p.name for p in out.iterdir()) == sorted([MANIFEST_NAME, *inodes])
    assert numbers(out) == expected(3)
    assert verify(out)[1] == []


def test_the_merge_waits_for_every_part(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_part(str(out), 0, 3)
    write_part(str(out), 2, 3)
    with pytest.raises(DataError, match=r"merge_parts .*: part 1 of 3 is not finished \(1 "
                                        r"missing\); run its writer"):
        dp.merge_parts(out)
    writing = dp.DatasetWriter(out, COLUMNS, part=1, parts=3)
    try:
        with pytest.raises(ArgumentError, match=r"is being written by the parts of a parallel "
                                                r"write"):
            dp.merge_parts(out)
        with pytest.raises(ArgumentError, match="being written by the parts"):
            dp.DatasetWriter(out, COLUMNS)  # nor a single writer beside them
        writing.write({"n": 1000, "vec": [0, 0], "name": "part 1"})
    finally:
        writing.close()
    assert not (out / MANIFEST_NAME).exists()
    dp.merge_parts(out)
    assert numbers(out) == [*expected(1), 1000, *expected(3)[50:]]


def test_a_part_written_again_replaces_its_failed_attempts(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_part(str(out), 0, 2)
    script = textwrap.dedent(f"""
        import os, signal, datapipe as dp
        w = dp.DatasetWriter({str(out)!r}, {COLUMNS!r}, part=1, parts=2, shard_size="300B")
        for i in range(600):
            w.write({{"n": -i, "vec": [0, 0], "name": "killed"}})
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == -9
    assert any(p.name.startswith("shard-part00001-") for p in out.iterdir())
    with pytest.raises(DataError, match="part 1 of 2 is not finished"):
        dp.merge_parts(out)
    with pytest.raises(RuntimeError), dp.DatasetWriter(out, COLUMNS, part=1, parts=2) as w:
        w.write({"n": -1, "vec": [0, 0], "name": "raised"})
        raise RuntimeError("stop")
    write_part(str(out), 1, 2, count=3)
    dp.merge_parts(out)
    assert numbers(out) == [*expected(1), 1000, 1001, 1002]


def test_parts_replace_a_dataset_only_when_asked_and_its_shards_go_at_the_merge(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    with dp.DatasetWriter(out, COLUMNS, shard_size="300B") as writer:
        writer.write_all({"n": -i, "vec": [0, 0], "name": "old"} for i in range(30))
    with pytest.raises(ArgumentError, match="already holds a finished dataset; pass "
                                            "overwrite=True"):
        write_part(str(out), 0, 2)
    write_part(str(out), 0, 2, overwrite=True)
    assert not (out / MANIFEST_NAME).exists()  # unpublished at once
    write_part(str(out), 1, 2, overwrite=True)
    dp.merge_parts(out)
    assert numbers(out) == expected(2)
    assert not any(p.name.startswith("shard-0") for p in out.iterdir())  # the old dataset's


def test_parts_that_disagree_or_are_no_parts_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_part(str(out), 0, 2)
    with dp.DatasetWriter(out, {"n": "int32"}, part=1, parts=2) as writer:
        writer.write({"n": 1})
    with pytest.raises(DataError, match="part 1 was written with other columns or settings"):
        dp.merge_parts(out)
    with pytest.raises(DataError, match="no finished part to merge"):
        dp.merge_parts(tmp_path)
    with pytest.raises(ArgumentError, match="is not a folder"):
        dp.merge_parts(tmp_path / "nowhere")


def test_finished_parts_are_not_taken_by_a_single_writer(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_part(str(out), 0, 2)
    with pytest.raises(ArgumentError, match="holds finished parts of a parallel write; join "
                                            "them with merge_parts"):
        dp.DatasetWriter(out, COLUMNS)


def test_an_empty_part_is_a_part(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_part(str(out), 0, 2, count=0)
    write_part(str(out), 1, 2, count=2)
    assert dp.merge_parts(out).num_samples == 2


def test_parts_written_to_s3_merge_there(s3_bucket: str, tmp_path: Path) -> None:
    url = f"{s3_bucket}/parts"
    for part in (1, 0):  # one staging folder given: each part makes its files in its own
        write_part(url, part, 2, count=10, staging=tmp_path / "staging")
    assert list((tmp_path / "staging").iterdir()) == []
    with pytest.raises(DataError, match="missing"):
        dp.Dataset(url)
    manifest = dp.merge_parts(url)
    assert manifest.num_samples == 20
    assert numbers(url) == expected(2, count=10)
    from tests.s3server import list_keys

    keys = [k for k in list_keys(url) if k]  # "": the folder marker pyarrow leaves on a delete
    assert sorted(keys) == sorted([MANIFEST_NAME, *(s.name for s in manifest.shards)])
