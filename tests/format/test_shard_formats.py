"""The table of shard formats: each format found by its name, and the scalar reader each one
gives agrees with its shard reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from datapipe.errors import DataError
from datapipe.format import Column, Manifest, ShardSetWriter, open_shard
from datapipe.format.shard_formats import FORMAT_NAMES, get_format

COLUMNS = (Column("image", "bytes"), Column("label", "int64"), Column("height", "int32"),
           Column("score", "float64"), Column("path", "string"))
SCALARS = ["label", "height", "score"]


def _write(directory: Path, fmt: str) -> list[Path]:
    writer = ShardSetWriter(directory, COLUMNS, fmt, 400)
    for i in range(30):
        writer.add({"image": bytes([i]) * (i + 5), "label": i % 4, "height": 10 + i,
                    "score": i / 8, "path": f"{i}.jpg"})
    writer.flush()
    return [directory / s.name for s in writer.shards]


def test_the_formats_are_arrow_and_msgpack_with_their_suffixes() -> None:
    assert FORMAT_NAMES == ("arrow", "msgpack")
    assert [get_format(name).suffix for name in FORMAT_NAMES] == [".arrow", ".msgpack"]


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_shards_carry_their_format_suffix(tmp_path: Path, fmt: str) -> None:
    shards = _write(tmp_path, fmt)
    assert len(shards) > 1
    assert all(path.suffix == get_format(fmt).suffix for path in shards)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_the_scalar_reader_reads_what_the_shard_reader_reads(tmp_path: Path, fmt: str) -> None:
    read_scalars = get_format(fmt).codec.read_scalars
    for path in _write(tmp_path, fmt):
        reader = open_shard(path, fmt, COLUMNS)
        with pa.OSFile(str(path)) as file:
            scalars = read_scalars(file, path.stat().st_size, COLUMNS, SCALARS)
        assert list(scalars) == SCALARS
        for name in SCALARS:
            np.testing.assert_array_equal(scalars[name], reader.scalar(name))
            assert scalars[name].dtype == reader.scalar(name).dtype
        reader.close()


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_the_scalar_reader_raises_value_error_on_a_cut_shard(tmp_path: Path, fmt: str) -> None:
    path = _write(tmp_path, fmt)[0]
    path.write_bytes(path.read_bytes()[:-20])
    with pa.OSFile(str(path)) as file, pytest.raises(ValueError):
        get_format(fmt).codec.read_scalars(file, path.stat().st_size, COLUMNS, SCALARS)


def test_an_unknown_format_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"^unknown shard format 'parquet'$"):
        get_format("parquet")
    with pytest.raises(DataError, match=r"shard-00000.parquet: unknown shard format 'parquet'"):
        open_shard(tmp_path / "shard-00000.parquet", "parquet", COLUMNS)
    with pytest.raises(DataError, match="unknown shard format 'parquet'"):
        Manifest("images", "parquet", COLUMNS, ())
    with pytest.raises(DataError, match=r"unknown shard format \['arrow'\]"):
        Manifest("images", ["arrow"], COLUMNS, ())  # type: ignore[arg-type]
