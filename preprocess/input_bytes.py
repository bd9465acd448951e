"""The bytes of a span's images that lie inside files of many (tars, Parquet), read by the
conversion worker that converts them.

A span's images in one tar are read as few byte ranges (one, unless other members between them
are large); its rows of one Parquet row group in one pass over that group, a batch of rows at a
time. A row group split over several tasks is read on from where this process's last task
stopped, not again from its start: each process reads such a group once.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from preprocess.file_access import InputFile, RangeReader, open_seekable
from preprocess.image_inputs import ImageItem, ParquetRow, TarMember

MAX_GAP = 1 << 20  # bytes between two images of a tar read in one range, not two
BATCH_ROWS = 64  # Parquet rows decoded at a time: bounds a worker's memory on big row groups
READ_BUFFER = 4 << 20  # Parquet pages are read through a buffer of this size


@dataclass(frozen=True)
class Unreadable:
    """The item's bytes could not be had: its reject reason."""

    reason: str


InputData = bytes | Unreadable | None  # None: a file of its own, which the caller opens


def span_inputs(files: tuple[InputFile, ...], image_columns: tuple[str, ...],
                items: Sequence[ImageItem]) -> Iterator[InputData]:
    """What each of `items` holds, in order."""
    for (kind, number), run in itertools.groupby(items, key=_container):
        run = list(run)
        if kind is TarMember:
            yield from _tar_members(files[number], [i.member for i in run])
        elif kind is ParquetRow:
            yield from _parquet_rows(files[number], image_columns[number],
                                     [i.member for i in run])
        else:
            yield from (None for _ in run)


def _container(item: ImageItem) -> tuple[type | None, int]:
    member = item.member
    return (type(member), member.file) if member is not None and item.problem is None else \
        (None, -1)


def _tar_members(file: InputFile, members: list[TarMember]) -> Iterator[InputData]:
    with RangeReader(file) as reader:
        for group in _nearby(members):
            start = group[0].offset
            data = reader.read(start, group[-1].offset + group[-1].size - start)
            for member in group:
                cell = data[member.offset - start:member.offset - start + member.size]
                yield cell if len(cell) == member.size else Unreadable(
                    f"{file.name} is shorter than when it was listed (changed since?)")


def _nearby(members: list[TarMember]) -> Iterator[list[TarMember]]:
    """Members in runs close enough to read as one range."""
    group = [members[0]]
    for member in members[1:]:
        if member.offset - (group[-1].offset + group[-1].size) > MAX_GAP:
            yield group
            group = []
        group.append(member)
    yield group


def _parquet_rows(file: InputFile, column: str, rows: list[ParquetRow]) -> Iterator[InputData]:
    for group, in_group in itertools.groupby(rows, key=lambda row: row.group):
        wanted = [row.row for row in in_group]
        reader = _RowGroupReader.for_rows(file, column, group, wanted[0])
        yield from (_image_cell(cell) for cell in reader.cells(wanted))


def _image_cell(cell: Any) -> InputData:
    """A Hugging Face image (a dict of bytes and path) or plain bytes."""
    if isinstance(cell, dict):
        data = cell.get("bytes")
        if data is None and cell.get("path"):
            return Unreadable(f"no image bytes in the file, only the path {cell['path']!r}")
        cell = data
    return Unreadable("the image is null") if cell is None else cell


class _RowGroupReader:
    """One row group's image column, read forward a batch at a time."""

    _last: _RowGroupReader | None = None  # this process's, for its next task to go on from

    def __init__(self, key: tuple, file: InputFile, column: str, group: int) -> None:
        import pyarrow.parquet as pq

        self.key = key
        parquet = pq.ParquetFile(open_seekable(file), buffer_size=READ_BUFFER,
                                 pre_buffer=False)
        self.rows = parquet.metadata.row_group(group).num_rows
        self.batches = parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=[group],
                                            columns=[column])
        self.start = 0  # the row of the group that self.batch begins with
        self.batch: list[Any] = []

    @classmethod
    def for_rows(cls, file: InputFile, column: str, group: int, first: int) -> _RowGroupReader:
        # The process is in the key: a forked worker never goes on with its parent's reader.
        key = (os.getpid(), file.location, file.size, column, group)
        last = cls._last
        if last is None or last.key != key or first < last.start:
            last = cls._last = cls(key, file, column, group)
        return last

    def cells(self, rows: list[int]) -> Iterator[Any]:
        for row in rows:
            while row >= self.start + len(self.batch):
                self.start += len(self.batch)
                self.batch = next(self.batches).column(0).to_pylist()
            yield self.batch[row - self.start]
        if rows[-1] == self.rows - 1 and _RowGroupReader._last is self:
            _RowGroupReader._last = None  # the group is done: nothing to go on with
