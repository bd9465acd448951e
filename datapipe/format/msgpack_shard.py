"""msgpack shards: one msgpack record per sample plus a footer index, so rows are random-access.

Layout: MAGIC | record 0 | record 1 | ... | footer (msgpack map) | footer length (u64 LE) | MAGIC.
A record is a msgpack array of the row's values in column order (payloads as `bin`, token ids
and arrays as their little-endian bytes). The footer holds the row offsets (u64 each,
absolute, rows + 1) and every scalar column as a packed array, so labels and lengths never
need a record decoded.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any, BinaryIO

import msgpack
import numpy as np

from datapipe.errors import DataError
from datapipe.format.chunk_columns import ChunkColumns
from datapipe.format.schema import Column
from datapipe.format.shard_reader import ShardReader, stored_type_problem

MAGIC = b"DPMSGPK1"
_TAIL = struct.Struct("<Q")


def _encode_cell(col: Column, value: Any) -> Any:
    if col.is_list:
        return np.ascontiguousarray(value, dtype=col.numpy_dtype.newbyteorder("<")).tobytes()
    if col.type == "bytes":
        return bytes(value)
    return value


def _row_cells(chunk: ChunkColumns, col: Column) -> Any:
    """The chunk's cells of `col` for the records. A float32 or float16 number is rounded as the
    typed footer column stores it (one cast per chunk), so a row reads back what a column
    read gives."""
    cells = chunk.cells(col.name)
    if col.is_scalar and col.numpy_dtype.kind == "f" and col.numpy_dtype.itemsize < 8:
        return np.asarray(cells, dtype=col.numpy_dtype).tolist()
    return cells


class MsgpackShardStream:
    """Writes a msgpack shard into `f`: records as rows are appended, the footer at the end."""

    def __init__(self, f: BinaryIO, columns: tuple[Column, ...]) -> None:
        self._file = f
        self._columns = columns
        self._packer = msgpack.Packer(use_bin_type=True)
        self._offsets: list[int] = []
        self._scalars: dict[str, list] = {c.name: [] for c in columns if c.is_scalar}
        f.write(MAGIC)
        self._position = len(MAGIC)

    def append(self, chunk: ChunkColumns) -> None:
        columns = [_row_cells(chunk, c) for c in self._columns]
        for row in zip(*columns, strict=True):
            self._offsets.append(self._position)
            record = self._packer.pack([_encode_cell(c, value)
                                        for c, value in zip(self._columns, row, strict=True)])
            self._file.write(record)
            self._position += len(record)
        for name, values in self._scalars.items():
            values.extend(chunk.scalars(name))

    def finish(self) -> None:
        offsets = np.array([*self._offsets, self._position], dtype="<u8")
        scalars = {c.name: np.asarray(self._scalars[c.name],
                                      dtype=c.numpy_dtype.newbyteorder("<")).tobytes()
                   for c in self._columns if c.is_scalar}
        footer = self._packer.pack({"rows": len(self._offsets),
                                    "columns": [c.to_json() for c in self._columns],
                                    "offsets": offsets.tobytes(), "scalars": scalars})
        self._file.write(footer)
        self._file.write(_TAIL.pack(len(footer)))
        self._file.write(MAGIC)


class MsgpackShardReader(ShardReader):
    """The cheap structural check: at open, the footer's index must be sound (record offsets
    increasing from the first record to the footer, a scalar per row); each record, when read,
    must unpack to one cell per column, payloads as whole `bin` values of their dtype. Without
    `check_index`, only the first and last record offsets are checked."""

    def __init__(self, path: str | Path, columns: tuple[Column, ...],
                 first_sample: int = 0, where: str | None = None,
                 dataset: str | None = None, check_index: bool = True) -> None:
        super().__init__(path, columns, first_sample, where, dataset, check_index)
        try:
            with open(self.path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            raise DataError(f"{self.where}: shard file is missing") from None
        except (OSError, ValueError) as exc:
            raise DataError(f"{self.where}: not a readable msgpack shard ({exc})") from None
        footer, footer_start = self._read_footer()
        try:
            self._read_index(footer, footer_start)
        except DataError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise self.corrupt_shard(f"damaged msgpack shard index ({exc})") from None

    def _read_index(self, footer: dict, footer_start: int) -> None:
        self.num_rows = int(footer["rows"])
        self._offsets = np.frombuffer(footer["offsets"], dtype="<u8")
        stored = [c["name"] for c in footer["columns"]]
        self._position = {name: i for i, name in enumerate(stored)}
        missing = [n for n in self.columns if n not in self._position]
        if missing or len(self._offsets) != self.num_rows + 1:
            raise DataError(f"{self.where}: shard lacks columns {missing} or its index is damaged")
        for stored_column in footer["columns"]:
            column = self.columns.get(stored_column["name"])
            if column is None:
                continue
            problem = stored_type_problem(column, stored_column["type"], column.type)
            if problem:
                raise self.corrupt_shard(problem)
        self._check_offsets(footer_start)
        self._scalars: dict[str, np.ndarray] = {}
        for name, raw in footer["scalars"].items():
            if name in self.columns:
                dtype = self.columns[name].numpy_dtype
                if len(raw) != self.num_rows * dtype.itemsize:
                    raise self.corrupt_shard(f"column {name!r} holds {len(raw)} bytes for "
                                             f"{self.num_rows} rows")
                self._scalars[name] = np.frombuffer(raw, dtype=dtype)

    def _check_offsets(self, footer_start: int) -> None:
        """Every record starts after the previous one (a record is never empty); the first
        right after the magic, the last ends where the footer starts."""
        offsets = self._offsets
        if offsets[0] != len(MAGIC):
            raise self.corrupt(0, f"record offset {offsets[0]} is not {len(MAGIC)}")
        if self.check_index:
            bad = offsets[1:] <= offsets[:-1]
            if bad.any():
                raise self.corrupt(int(np.argmax(bad)), "record offsets out of order")
        if offsets[-1] != footer_start:
            raise self.corrupt(self.num_rows - 1, f"last record ends at {offsets[-1]}, the "
                               f"footer starts at {footer_start}")

    def _read_footer(self) -> tuple[dict, int]:
        m = self._map
        tail = len(MAGIC) + _TAIL.size
        if len(m) < len(MAGIC) + tail or m[:8] != MAGIC or m[-8:] != MAGIC:
            raise self.corrupt_shard("not a datapipe msgpack shard (bad magic)")
        (footer_len,) = _TAIL.unpack(m[-tail:-8])
        start = len(m) - tail - footer_len
        if start < len(MAGIC):
            raise self.corrupt_shard("damaged msgpack shard footer")
        try:
            footer = msgpack.unpackb(m[start:start + footer_len], raw=False)
        except (ValueError, msgpack.UnpackException) as exc:
            raise self.corrupt_shard(f"damaged msgpack shard footer ({exc})") from None
        if not isinstance(footer, dict):
            raise self.corrupt_shard("damaged msgpack shard footer")
        return footer, start

    def _record(self, row: int) -> list:
        self._check_row(row)
        a, b = int(self._offsets[row]), int(self._offsets[row + 1])
        try:
            record = msgpack.unpackb(self._map[a:b], raw=False)
        except (ValueError, msgpack.UnpackException) as exc:
            raise self.corrupt(row, f"damaged record ({exc})") from None
        if not isinstance(record, list) or len(record) != len(self._position):
            raise self.corrupt(row, "damaged record (not one cell per column)")
        return record

    def scalar(self, name: str) -> np.ndarray:
        col = self._column(name)
        if not col.is_scalar:
            raise DataError(f"{self.where}: column {name!r} is {col.type}, not a scalar")
        return self._scalars[name]

    def payload(self, name: str, row: int) -> np.ndarray:
        col = self._column(name)
        if not col.is_payload:
            raise DataError(f"{self.where}: column {name!r} is not a payload column")
        cell = self._record(row)[self._position[name]]
        if not isinstance(cell, bytes) or len(cell) % col.numpy_dtype.itemsize:
            raise self.corrupt(row, f"damaged record (column {name!r} is not a whole "
                                    f"{col.numpy_dtype} array)")
        return np.frombuffer(cell, dtype=col.numpy_dtype)

    def value(self, name: str, row: int) -> Any:
        self._column(name)
        return self._record(row)[self._position[name]]

    def close(self) -> None:
        self._scalars.clear()
        self._offsets = np.empty(0, dtype="<u8")
        self._map.close()


def read_scalars(file: Any, size: int, columns: tuple[Column, ...],
                 names: list[str]) -> dict[str, np.ndarray]:
    """The scalar columns `names` of the shard in `file` (a random-access file of `size`
    bytes), from its footer alone: two reads at the end of the file (see scalar_index.py)."""
    tail = _TAIL.size + len(MAGIC)
    end = file.read_at(tail, size - tail) if size >= tail else b""  # read_at gives bytes
    if len(end) != tail or end[-len(MAGIC):] != MAGIC:
        raise ValueError("bad magic")
    (footer_len,) = _TAIL.unpack(end[:_TAIL.size])
    if footer_len > size - tail - len(MAGIC):
        raise ValueError("footer length past the start of the file")
    try:
        footer = msgpack.unpackb(file.read_at(footer_len, size - tail - footer_len), raw=False)
    except msgpack.UnpackException as exc:  # not a ValueError, unlike its subclasses
        raise ValueError(str(exc)) from None
    stored = {c["name"]: c["type"] for c in footer["columns"]}
    for column in columns:
        if column.name in names:
            problem = stored_type_problem(column, stored[column.name], column.type)
            if problem:
                raise ValueError(problem)
    return {name: np.frombuffer(footer["scalars"][name],
                                dtype=next(c for c in columns if c.name == name).numpy_dtype)
            for name in names}
