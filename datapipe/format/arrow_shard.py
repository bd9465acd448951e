"""Arrow IPC shards: record batches in a memory-mappable file, read without copies."""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

from datapipe.errors import DataError
from datapipe.format.chunk_columns import ChunkColumns, JoinedCells
from datapipe.format.schema import Column
from datapipe.format.shard_reader import ShardReader, stored_type_problem


def arrow_type(col: Column) -> pa.DataType:
    # Large (64-bit offset) types: a shard never hits the 2 GiB limit of 32-bit offsets.
    if col.is_scalar:
        return pa.from_numpy_dtype(col.numpy_dtype)
    if col.type == "bytes":
        return pa.large_binary()
    if col.type == "string":
        return pa.large_string()
    return pa.large_list(pa.from_numpy_dtype(col.numpy_dtype))


def _joined_array(joined: JoinedCells, col: Column) -> pa.Array:
    """A bytes, string or array column from the chunk's joined buffer and its offsets, without
    a copy: pa.array() over a list of bytes is several times slower (and imports pandas when it
    is installed). Same bytes on disk either way."""
    offsets, values = joined.offsets(), joined.values()
    if col.is_list:
        return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))
    kind = pa.large_string() if col.type == "string" else pa.large_binary()
    return pa.Array.from_buffers(kind, len(offsets) - 1,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(values)])


def _number_array(values: list, col: Column) -> pa.Array:
    """A number column from its numpy array's buffer: pa.array() would import pandas (a third
    of a second, once per writing process, in every conversion). Same bytes on disk."""
    array = np.asarray(values, dtype=col.numpy_dtype)
    return pa.Array.from_buffers(arrow_type(col), len(array), [None, pa.py_buffer(array)])


class ArrowShardStream:
    """Writes an Arrow IPC file into `sink`: each append is one record batch."""

    def __init__(self, sink: BinaryIO, columns: tuple[Column, ...]) -> None:
        self._columns = columns
        self._schema = pa.schema([pa.field(c.name, arrow_type(c), nullable=False)
                                  for c in columns])
        self._stream = pa.PythonFile(sink, mode="w")
        self._writer = pa.ipc.new_file(self._stream, self._schema)

    def append(self, chunk: ChunkColumns) -> None:
        arrays = [_number_array(chunk.scalars(c.name), c) if c.is_scalar
                  else _joined_array(chunk.joined(c.name), c) for c in self._columns]
        self._writer.write_batch(pa.record_batch(arrays, schema=self._schema))

    def finish(self) -> None:
        self._writer.close()
        self._stream.close()


class ArrowShardReader(ShardReader):
    """Memory-maps the file; payload columns become numpy views over the mapping. Without
    `check_index`, Arrow's basic validation (buffer sizes, per batch) replaces its full one."""

    def __init__(self, path: str | Path, columns: tuple[Column, ...],
                 first_sample: int = 0, where: str | None = None,
                 dataset: str | None = None, check_index: bool = True) -> None:
        super().__init__(path, columns, first_sample, where, dataset, check_index)
        try:
            self._source = pa.memory_map(str(self.path), "r")
            reader = pa.ipc.open_file(self._source)
            batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        except FileNotFoundError:
            raise DataError(f"{self.where}: shard file is missing") from None
        except (pa.ArrowInvalid, OSError) as exc:
            raise self.corrupt_shard(f"not a readable Arrow shard ({exc})") from None
        if not batches:
            raise DataError(f"{self.where}: Arrow shard has no record batches")
        table = pa.Table.from_batches(batches)
        for name, col in self.columns.items():
            if name not in table.column_names:
                raise DataError(f"{self.where}: shard lacks column {name!r}")
            problem = stored_type_problem(col, table.schema.field(name).type, arrow_type(col))
            if problem:
                raise self.corrupt_shard(problem)
        self._check_structure(batches)
        self._table = table
        self.num_rows = table.num_rows
        # Row -> (batch, local row): a batch per CHUNK_BYTES written, any number read.
        self._batch_starts = np.cumsum([0] + [b.num_rows for b in batches]).tolist()
        self._payloads: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        for name, col in self.columns.items():
            if col.is_payload:
                self._payloads[name] = [_payload_views(b.column(name), col) for b in batches]

    def _check_structure(self, batches: list[pa.RecordBatch]) -> None:
        """Arrow's full validation: offsets in range and monotonic, strings valid UTF-8. It
        reads offsets and strings, not payloads (0.1 ms for a 200 MB shard of 180k documents;
        ~2 ns a row)."""
        start = 0
        for batch in batches:
            try:
                batch.validate(full=self.check_index)
            except pa.ArrowInvalid as exc:
                bad = _first_bad_offset(batch)
                if bad is None:
                    raise self.corrupt_shard(f"damaged Arrow data ({exc})") from None
                name, row = bad
                raise self.corrupt(start + row, f"column {name!r} has offsets out of range or "
                                   "out of order") from None
            start += batch.num_rows

    def scalar(self, name: str) -> np.ndarray:
        col = self._column(name)
        if not col.is_scalar:
            raise DataError(f"{self.where}: column {name!r} is {col.type}, not a scalar")
        # Straight from the value buffers: to_numpy() imports pandas when it is installed, which
        # costs 0.3 s in every fresh worker.
        dtype = col.numpy_dtype
        chunks = [np.frombuffer(c.buffers()[1], dtype=dtype, count=len(c) + c.offset)[c.offset:]
                  for c in self._table.column(name).chunks]
        if not chunks:
            return np.empty(0, dtype=dtype)
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)

    def payload(self, name: str, row: int) -> np.ndarray:
        self._check_row(row)
        views = self._payloads.get(name)
        if views is None:
            raise DataError(f"{self.where}: column {name!r} is not a payload column")
        if len(views) == 1:
            offsets, values = views[0]
        else:
            b = bisect.bisect_right(self._batch_starts, row) - 1
            offsets, values = views[b]
            row -= self._batch_starts[b]
        return values[offsets[row]:offsets[row + 1]]

    def payload_views(self, name: str) -> list[tuple[np.ndarray, np.ndarray]]:
        """(offsets, values) per record batch, for hot paths that slice many rows at once."""
        return self._payloads[name]

    def batch_starts(self) -> list[int]:
        """The first row of each record batch (the views of `payload_views`)."""
        return self._batch_starts[:-1]

    def payload_lengths(self, name: str) -> np.ndarray | None:
        views = self._payloads.get(name)
        if views is None:
            return None
        spans = [np.diff(offsets) for offsets, _ in views]
        return spans[0] if len(spans) == 1 else np.concatenate(spans)

    def value(self, name: str, row: int) -> Any:
        self._check_row(row)
        self._column(name)
        return self._table.column(name)[row].as_py()

    def values(self, name: str, rows: list[int]) -> list[Any]:
        """One `take` for the rows (indexing the column cell by cell costs ~5 us a cell)."""
        for row in (min(rows), max(rows)) if rows else ():
            self._check_row(row)
        self._column(name)
        return self._table.column(name).take(rows).to_pylist()

    def close(self) -> None:
        self._payloads.clear()
        self._table = None
        self._source.close()


def read_scalars(file: Any, size: int, columns: tuple[Column, ...],
                 names: list[str]) -> dict[str, np.ndarray]:
    """The scalar columns `names` of the shard in `file` (a random-access file of `size`
    bytes), reading their buffers alone (see scalar_index.py)."""
    fields = [i for i, c in enumerate(columns) if c.name in names]  # storage order
    options = pa.ipc.IpcReadOptions(included_fields=fields)
    reader = pa.ipc.open_file(file, options=options)
    for name in names:
        column = next(c for c in columns if c.name == name)
        problem = stored_type_problem(column, str(reader.schema.field(name).type),
                                      str(arrow_type(column)))
        if problem:
            raise ValueError(problem)
    batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
    out = {}
    for name in names:
        dtype = next(c for c in columns if c.name == name).numpy_dtype
        chunks = []
        for batch in batches:
            array = batch.column(name)  # KeyError: a shard without the column
            chunks.append(np.frombuffer(array.buffers()[1], dtype=dtype,
                                        count=len(array) + array.offset)[array.offset:])
        out[name] = np.concatenate(chunks) if chunks else np.empty(0, dtype=dtype)
    return out


def _payload_views(array: pa.Array, col: Column) -> tuple[np.ndarray, np.ndarray]:
    if array.offset != 0:
        raise DataError(f"column {col.name!r}: sliced arrays are not supported in shards")
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64, count=len(array) + 1)
    data_buffer = buffers[2] if col.type == "bytes" else buffers[3]
    if data_buffer is None:  # every row empty
        return offsets, np.empty(0, dtype=col.numpy_dtype)
    values = np.frombuffer(data_buffer, dtype=col.numpy_dtype)
    return offsets, values


def _first_bad_offset(batch: pa.RecordBatch) -> tuple[str, int] | None:
    """(column, row) of the first row whose offsets are negative, decreasing or past the end
    of their values; None when every variable-length column's offsets are sound."""
    for name, array in zip(batch.schema.names, batch.columns, strict=True):
        if pa.types.is_large_list(array.type):
            limit = len(array.values)
        elif pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type):
            limit = array.buffers()[2].size if array.buffers()[2] is not None else 0
        else:
            continue
        offsets = np.frombuffer(array.buffers()[1], dtype=np.int64,
                                count=len(array) + 1 + array.offset)[array.offset:]
        bad = (offsets[:-1] < 0) | (offsets[1:] < offsets[:-1]) | (offsets[1:] > limit)
        if bad.any():
            return name, int(np.argmax(bad))
    return None
