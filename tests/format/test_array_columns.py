"""Array and number columns in the shard format: their types, and a fixed-shape array whose
stored size is not its shape's refused by readers (at open where the format keeps offsets,
as it is read otherwise) and by `datapipe verify`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from datapipe.errors import DataError
from datapipe.format import Column, Dataset, Manifest, ShardSetWriter
from datapipe.inspection import verify


@pytest.mark.parametrize(("kind", "shape", "dtype"), [
    ("float32[]", None, "float32"), ("uint8[32,32,3]", (32, 32, 3), "uint8"),
    ("int64[7]", (7,), "int64"), ("float16", None, "float16"), ("uint64", None, "uint64"),
])
def test_column_types_of_numbers_and_arrays(kind: str, shape: tuple | None,
                                            dtype: str) -> None:
    column = Column("x", kind)
    assert column.shape == shape and column.numpy_dtype == np.dtype(dtype)
    assert column.is_payload == column.is_list == ("[" in kind)


@pytest.mark.parametrize("kind", ["float32[0]", "float32[3,]", "complex64[]", "int7", "u8[]",
                                  "float32[-1]", "float32[ 3]"])
def test_malformed_array_types_are_unknown(kind: str) -> None:
    with pytest.raises(DataError, match="unknown type"):
        Column("x", kind)


def _write(directory: Path, fmt: str) -> None:
    columns = (Column("n", "int8"), Column("v", "float32[3]"))
    directory.mkdir()
    writer = ShardSetWriter(directory, columns, fmt, 1 << 20)
    for i, size in enumerate([3, 2, 3]):  # row 1 holds two numbers, not three
        writer.add({"n": i, "v": np.zeros(size, np.float32)})
    writer.flush()
    writer.close()
    Manifest("table", fmt, columns, tuple(writer.shards)).save(directory)


def test_a_fixed_shape_array_of_another_size_is_refused_where_read(tmp_path: Path) -> None:
    _write(tmp_path / "arrow", "arrow")
    with pytest.raises(DataError, match=r"row 1 \(sample 1\): column 'v' holds 2 numbers, not "
                                        r"3 \(shape \(3,\)\)"), Dataset(tmp_path / "arrow") as ds:
        ds[0]  # the shard's index is checked as it opens
    _write(tmp_path / "msgpack", "msgpack")
    with Dataset(tmp_path / "msgpack") as ds:
        assert ds[0]["v"].shape == (3,) and ds[2]["n"] == 2
        with pytest.raises(DataError, match=r"row 1 \(sample 1\): column 'v' holds 2 numbers"):
            ds[1]
    for fmt in ("arrow", "msgpack"):
        problems = verify(tmp_path / fmt)[1]
        assert len(problems) == 1 and "column 'v' holds 2 numbers, not 3" in problems[0].problem
