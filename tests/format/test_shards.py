from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from datapipe.errors import DataError
from datapipe.format import Column, Dataset, Manifest, ShardSetWriter, token_type_for_vocab
from datapipe.format.manifest import MANIFEST_NAME
from datapipe.format.writer import rows_nbytes

COLUMNS = (Column("image", "bytes"), Column("label", "int64"), Column("score", "float64"),
           Column("tokens", "tokens:uint16"), Column("path", "string"))


def _sample(i: int) -> dict:
    return {"image": bytes([i % 256]) * (i + 1), "label": i % 7, "score": i / 4,
            "tokens": np.arange(i, dtype=np.uint16) * 3, "path": f"file_{i}.jpg"}


def _write_dataset(directory: Path, fmt: str, n: int = 40, target: int = 300) -> Manifest:
    writer = ShardSetWriter(directory, COLUMNS, fmt, target)
    for i in range(n):
        writer.add(_sample(i))
    writer.flush()
    manifest = Manifest("test", fmt, COLUMNS, tuple(writer.shards))
    manifest.save(directory)
    return manifest


@pytest.mark.parametrize("fmt", ["arrow", "msgpack"])
def test_round_trip_every_column_type(tmp_path: Path, fmt: str) -> None:
    manifest = _write_dataset(tmp_path, fmt)
    assert len(manifest.shards) > 3, "small target size must split into several shards"
    with Dataset(tmp_path) as ds:
        assert len(ds) == 40
        for i in range(40):
            row, want = ds[i], _sample(i)
            assert bytes(row["image"]) == want["image"]
            assert row["tokens"].dtype == np.uint16
            np.testing.assert_array_equal(row["tokens"], want["tokens"])
            assert row["label"] == want["label"] and row["path"] == want["path"]
            assert row["score"] == pytest.approx(want["score"])
        np.testing.assert_array_equal(ds.scalar("label"), [i % 7 for i in range(40)])


@pytest.mark.parametrize("fmt", ["arrow", "msgpack"])
def test_samples_never_split_and_shards_respect_target(tmp_path: Path, fmt: str) -> None:
    manifest = _write_dataset(tmp_path, fmt, n=30, target=200)
    assert sum(s.rows for s in manifest.shards) == 30
    with Dataset(tmp_path) as ds:
        for k in range(ds.num_shards):
            shard = ds.shard(k)
            sizes = [shard.payload("image", r).nbytes + shard.payload("tokens", r).nbytes
                     for r in range(shard.num_rows)]
            # Over target only when a single sample is bigger than the target by itself.
            assert shard.num_rows == 1 or sum(sizes) <= 200 + 8 * 3 * shard.num_rows


def test_arrow_payload_is_zero_copy_view_of_the_mapping(tmp_path: Path) -> None:
    _write_dataset(tmp_path, "arrow")
    with Dataset(tmp_path) as ds:
        payload = ds[5]["image"]
        assert not payload.flags.owndata and not payload.flags.writeable


@pytest.mark.parametrize("fmt", ["arrow", "msgpack"])
def test_same_input_gives_byte_identical_shards(tmp_path: Path, fmt: str) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = _write_dataset(tmp_path / "a", fmt), _write_dataset(tmp_path / "b", fmt)
    assert a.shards == b.shards
    for shard in a.shards:
        a_bytes = (tmp_path / "a" / shard.name).read_bytes()
        assert a_bytes == (tmp_path / "b" / shard.name).read_bytes()


def test_unknown_manifest_version_is_a_clear_error(tmp_path: Path) -> None:
    _write_dataset(tmp_path, "arrow")
    path = tmp_path / MANIFEST_NAME
    obj = json.loads(path.read_text())
    obj["version"] = 99
    path.write_text(json.dumps(obj))
    with pytest.raises(DataError, match="version 99 is not supported"):
        Dataset(tmp_path)


def test_missing_manifest_and_missing_shard_are_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="missing"):
        Dataset(tmp_path)
    manifest = _write_dataset(tmp_path, "arrow")
    (tmp_path / manifest.shards[1].name).unlink()
    with Dataset(tmp_path) as ds, pytest.raises(DataError, match=manifest.shards[1].name):
        ds.shard(1)


@pytest.mark.parametrize("fmt", ["arrow", "msgpack"])
def test_garbage_shard_is_a_clear_error(tmp_path: Path, fmt: str) -> None:
    manifest = _write_dataset(tmp_path, fmt)
    (tmp_path / manifest.shards[0].name).write_bytes(b"not a shard at all" * 10)
    with Dataset(tmp_path) as ds, pytest.raises(DataError, match=manifest.shards[0].name):
        ds.shard(0)


def test_token_type_is_the_smallest_that_fits() -> None:
    assert token_type_for_vocab(256) == "tokens:uint8"
    assert token_type_for_vocab(257) == "tokens:uint16"
    assert token_type_for_vocab(65536) == "tokens:uint16"
    assert token_type_for_vocab(65537) == "tokens:uint32"
    with pytest.raises(DataError):
        token_type_for_vocab(1 << 33)


@pytest.mark.parametrize("fmt", ["arrow", "msgpack"])
def test_rows_added_in_groups_cut_the_shards_one_by_one_would(tmp_path: Path, fmt: str) -> None:
    """Converters hand the writer whole tasks' samples at once; the shards (and so the bytes)
    are those of adding them one at a time, with the tag of the row that opens each shard."""
    (tmp_path / "single").mkdir()
    (tmp_path / "groups").mkdir()
    one_by_one = _write_dataset(tmp_path / "single", fmt, n=40, target=300)
    tags: list[object] = []
    writer = ShardSetWriter(tmp_path / "groups", COLUMNS, fmt, 300,
                            on_shard=lambda info, tag: tags.append(tag))
    start = 0
    for size in [1, 7, 0, 13, 2, 17]:
        samples = [_sample(i) for i in range(start, start + size)]
        rows = {c.name: [s[c.name] for s in samples] for c in COLUMNS}
        writer.add_rows(rows, rows_nbytes(COLUMNS, rows), tags=list(range(start, start + size)))
        start += size
    writer.flush(tag="end")
    writer.close()
    assert start == 40 and [s.to_json() for s in writer.shards] == \
        [s.to_json() for s in one_by_one.shards]
    opening_rows = np.cumsum([s.rows for s in writer.shards])[:-1].tolist()
    assert tags == [*opening_rows, "end"]


@pytest.mark.parametrize("fmt", ["arrow", "msgpack"])
def test_a_shard_is_written_in_chunks_as_it_fills(tmp_path: Path, fmt: str) -> None:
    """Rows reach the shard file a chunk at a time (an Arrow record batch each), so most of a
    shard is on disk before it is cut. Chunks are cut by sample sizes alone: the bytes are the
    same however rows arrive, every row reads back, and a msgpack shard's bytes do not depend
    on the chunk size at all."""
    chunked: list[Manifest] = []
    for name, groups in [("one-by-one", [1] * 40), ("groups", [3, 11, 0, 19, 7])]:
        directory = tmp_path / name
        directory.mkdir()
        writer = ShardSetWriter(directory, COLUMNS, fmt, 2000, chunk_bytes=150)
        start = 0
        for size in groups:
            samples = [_sample(i) for i in range(start, start + size)]
            rows = {c.name: [s[c.name] for s in samples] for c in COLUMNS}
            writer.add_rows(rows, rows_nbytes(COLUMNS, rows))
            start += size
            if name == "groups" and start >= 14:  # a chunk was handed over mid-shard
                assert any(p.suffix == ".tmp" for p in directory.iterdir())
        writer.flush()
        writer.close()
        manifest = Manifest("test", fmt, COLUMNS, tuple(writer.shards))
        manifest.save(directory)
        chunked.append(manifest)
    assert [s.to_json() for s in chunked[0].shards] == [s.to_json() for s in chunked[1].shards]
    (tmp_path / "whole").mkdir()
    whole = _write_dataset(tmp_path / "whole", fmt, n=40, target=2000)
    assert [s.rows for s in whole.shards] == [s.rows for s in chunked[0].shards]
    if fmt == "msgpack":
        assert [s.hash for s in whole.shards] == [s.hash for s in chunked[0].shards]
    with Dataset(tmp_path / "groups") as ds:
        if fmt == "arrow":
            assert len(ds.shard(0).batch_starts()) > 3, "150-byte chunks: several batches"
        for i in range(40):
            np.testing.assert_array_equal(ds[i]["tokens"], _sample(i)["tokens"])
            assert bytes(ds[i]["image"]) == _sample(i)["image"]
        np.testing.assert_array_equal(ds.scalar("label"), [i % 7 for i in range(40)])


@pytest.mark.parametrize("fmt", ["arrow", "msgpack"])
def test_any_grouping_of_rows_cuts_the_same_shards_and_chunks(tmp_path: Path, fmt: str) -> None:
    """Where shards and chunks end is searched for within a group of rows: random groups of
    random sizes (some rows bigger than a chunk or a whole shard) give the bytes of adding the
    rows one at a time."""
    rng = np.random.default_rng(7)
    samples = [{**_sample(i), "tokens": np.arange(int(n), dtype=np.uint16)}
               for i, n in enumerate(rng.choice([0, 3, 20, 90, 400], size=120))]

    def write(name: str, groups: list[int]) -> list[dict]:
        (tmp_path / name).mkdir()
        writer = ShardSetWriter(tmp_path / name, COLUMNS, fmt, 700, chunk_bytes=250)
        start = 0
        for size in groups:
            group = samples[start:start + size]
            rows = {c.name: [s[c.name] for s in group] for c in COLUMNS}
            writer.add_rows(rows, rows_nbytes(COLUMNS, rows))
            start += size
        writer.flush()
        writer.close()
        return [s.to_json() for s in writer.shards]

    one_by_one = write("single", [1] * 120)
    assert sum(s["rows"] for s in one_by_one) == 120 and len(one_by_one) > 10
    (tmp_path / "rows").mkdir()  # add_row: a writer fed a sample at a time (DatasetWriter)
    writer = ShardSetWriter(tmp_path / "rows", COLUMNS, fmt, 700, chunk_bytes=250)
    for s in samples:
        writer.add_row([s[c.name] for c in COLUMNS], rows_nbytes(COLUMNS, {
            c.name: [s[c.name]] for c in COLUMNS})[0])
    writer.flush()
    writer.close()
    assert [s.to_json() for s in writer.shards] == one_by_one
    for attempt in range(3):
        cuts = np.sort(rng.choice(np.arange(1, 120), size=12 + 9 * attempt, replace=False))
        groups = np.diff([0, *cuts.tolist(), 120]).tolist()
        assert write(f"groups-{attempt}", groups) == one_by_one
