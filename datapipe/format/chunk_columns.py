"""The rows of one chunk of a shard, column by column, each payload copied into a buffer the
chunk keeps as it is added.

Why copy at once: a sample held until its chunk is written keeps tens of megabytes of sample
objects alive per writer; the allocator hands that memory back to the kernel as chunks are
freed and takes fresh pages for the next ones, and on a busy machine touching a fresh page
costs about what writing it to disk does. Copied while the caller's bytes are still in the
CPU's cache, the sample is freed at once, and the buffers (two per ShardSetWriter: the one
filling, the one being written) are the same memory chunk after chunk, shard after shard.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from datapipe.format.schema import Column


class JoinedCells:
    """Variable-length cells (bytes, strings as UTF-8, arrays of numbers) end to end in one
    buffer that grows as needed and is reused once cleared."""

    def __init__(self, dtype: np.dtype, reserve: int = 0, text: bool = False) -> None:
        # Reserved, not touched: the pages a chunk never fills are never mapped.
        self._buffer = np.empty(reserve // dtype.itemsize, dtype)
        self._text = text
        self._raw = dtype == np.uint8  # bytes-like cells, taken as their bytes
        self._lengths: list[int] = []
        self._used = 0

    def append(self, value: Any) -> None:
        """One row's cell: bytes-like, a string, or numbers (an array or a list)."""
        if self._text:
            value = value.encode()
        part = np.frombuffer(value, np.uint8) if self._raw else np.asarray(value)
        count = len(part)
        end = self._used + count
        if end > len(self._buffer):
            self._grow(end)
        self._buffer[self._used:end] = part  # cast: token ids of any integer type
        self._lengths.append(count)
        self._used = end

    def extend(self, values: Sequence[Any]) -> None:
        """Many rows' cells at once: one join, not a copy per row."""
        if self._text:
            values = [v.encode() for v in values]
        parts = [np.frombuffer(v, np.uint8) for v in values] if self._raw else values
        lengths = [len(p) for p in parts]
        end = self._used + sum(lengths)
        if end > len(self._buffer):
            self._grow(end)
        if parts:
            # casting="unsafe": token ids of any integer type become the column's dtype.
            np.concatenate(parts, out=self._buffer[self._used:end], casting="unsafe")
        self._lengths.extend(lengths)
        self._used = end

    def _grow(self, need: int) -> None:
        grown = np.empty(max(need, 2 * len(self._buffer)), self._buffer.dtype)
        grown[:self._used] = self._buffer[:self._used]
        self._buffer = grown

    def clear(self) -> None:
        self._lengths.clear()
        self._used = 0

    def offsets(self) -> np.ndarray:
        """int64, one more than the rows: row i is values()[offsets[i]:offsets[i + 1]]."""
        offsets = np.zeros(len(self._lengths) + 1, dtype=np.int64)
        np.cumsum(self._lengths, out=offsets[1:])
        return offsets

    def values(self) -> np.ndarray:
        """Every row's values end to end: a view valid until the next `clear`."""
        return self._buffer[:self._used]

    def cells(self) -> list[Any]:
        """Each row's cell on its own (views; strings decoded), for a format written a row at
        a time."""
        values, offsets = self.values(), self.offsets()
        cells = [values[a:b] for a, b in itertools.pairwise(offsets)]
        return [c.tobytes().decode() for c in cells] if self._text else cells


class ChunkColumns:
    """One chunk's rows: scalar columns as lists, the others as JoinedCells with room for
    `reserve` bytes each (grown if a chunk needs more). Cleared and filled again for the next
    chunk, so its buffers are allocated once per writer."""

    def __init__(self, columns: tuple[Column, ...], reserve: int = 0) -> None:
        self.rows = 0
        self._scalars: dict[str, list] = {}
        self._joined: dict[str, JoinedCells] = {}
        for col in columns:
            if col.is_scalar:
                self._scalars[col.name] = []
            else:
                self._joined[col.name] = JoinedCells(
                    col.numpy_dtype if col.is_list else np.dtype(np.uint8), reserve,
                    text=col.type == "string")
        # Each column's list or JoinedCells, in column order: `append` for both.
        self._slots = [self._scalars[c.name] if c.is_scalar else self._joined[c.name]
                       for c in columns]

    def append_row(self, cells: Sequence[Any]) -> None:
        """One row, its cells in column order, copied in."""
        for slot, cell in zip(self._slots, cells, strict=True):
            slot.append(cell)
        self.rows += 1

    def extend(self, rows: dict[str, Sequence[Any]], start: int, stop: int) -> None:
        """Rows start..stop of `rows` (given column by column), copied in."""
        for name, values in self._scalars.items():
            values.extend(rows[name][start:stop])
        for name, joined in self._joined.items():
            joined.extend(rows[name][start:stop])
        self.rows += stop - start

    def clear(self) -> None:
        for values in self._scalars.values():
            values.clear()
        for joined in self._joined.values():
            joined.clear()
        self.rows = 0

    def scalars(self, name: str) -> list:
        return self._scalars[name]

    def joined(self, name: str) -> JoinedCells:
        return self._joined[name]

    def cells(self, name: str) -> list[Any]:
        """Column `name`'s cells, a row each."""
        if name in self._scalars:
            return self._scalars[name]
        return self._joined[name].cells()
