"""`convert text`'s tasks, planned in the writing process without parsing any input: byte
ranges of text files cut at line ends, runs of Parquet row groups. The same process numbers
each span's documents (lines or rows) from the spans before it, and remembers where each span
began, so that a killed run resumes reading at a span rather than at the first file."""

from __future__ import annotations

import bisect
import dataclasses
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datapipe.errors import DataError
from preprocess.text_sources import TextOptions, TextSpan, file_kind, open_parquet

MIN_SPAN_BYTES = 4 << 10
MAX_SPAN_BYTES = 1 << 20  # a span's ids cross a pipe: a few MB at most
SPANS_PER_WORKER = 8  # so the last spans of a run end close together
_SCAN_BYTES = 1 << 16


@dataclass(frozen=True)
class Cursor:
    """Where reading starts: a span's first byte or row group, and what the spans before it
    said (the file's lines or rows so far, whether a JSON object came yet, documents)."""

    file: int = 0
    offset: int = 0
    number: int = 0
    seen_record: bool = False
    input: int = 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Cursor:
        return cls(**data) if data else cls()


def span_size(files: list[Path], workers: int) -> int:
    """Bytes per span: several spans per worker, within bounds."""
    total = sum(path.stat().st_size for path in files)
    return max(MIN_SPAN_BYTES, min(MAX_SPAN_BYTES, total // (workers * SPANS_PER_WORKER)))


def plan_spans(files: list[Path], options: TextOptions, size: int,
               cursor: Cursor) -> Iterator[TextSpan]:
    """The spans of every file, from `cursor` on, in order."""
    for index in range(cursor.file, len(files)):
        path, start = files[index], cursor.offset if index == cursor.file else 0
        kind = file_kind(path, options)
        if kind == "parquet":
            yield from _row_group_spans(path, index, start, options.field, size)
        elif kind == "file":
            yield TextSpan(index, kind, 0, _size_of(path))
        else:
            yield from _line_spans(path, index, kind, start, size)


def _size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as exc:
        raise DataError(f"{path}: unreadable ({exc.strerror or exc})") from None


def _line_spans(path: Path, index: int, kind: str, start: int,
                size: int) -> Iterator[TextSpan]:
    end = _size_of(path)
    try:
        with open(path, "rb") as file:
            cuts = []
            while start < end:
                stop = _line_end(file, min(start + size, end), end)
                cuts.append(TextSpan(index, kind, start, stop))
                start = stop
    except OSError as exc:
        raise DataError(f"{path}: unreadable ({exc.strerror or exc})") from None
    yield from cuts


def _line_end(file: Any, position: int, end: int) -> int:
    """The offset after the first newline at or after `position` (`end` if none): a newline
    byte is a line end and never part of a UTF-8 sequence."""
    file.seek(position)
    while position < end:
        chunk = file.read(_SCAN_BYTES)
        if not chunk:
            break
        newline = chunk.find(b"\n")
        if newline >= 0:
            return position + newline + 1
        position += len(chunk)
    return end


def _row_group_spans(path: Path, index: int, first: int, text_field: str,
                     size: int) -> Iterator[TextSpan]:
    metadata = open_parquet(path, text_field).metadata
    start, gathered = first, 0
    for group in range(first, metadata.num_row_groups):
        gathered += metadata.row_group(group).total_byte_size
        if gathered >= size:
            yield TextSpan(index, "parquet", start, group + 1)
            start, gathered = group + 1, 0
    if start < metadata.num_row_groups:
        yield TextSpan(index, "parquet", start, metadata.num_row_groups)


class SpanBook:
    """Numbers the spans' documents in the file they come from, as their results arrive in
    order, and keeps the cursor at each span's start for the journal."""

    def __init__(self, files: list[Path], cursor: Cursor, text_field: str) -> None:
        self.files, self.text_field = files, text_field
        self._file, self._number, self._seen = cursor.file, cursor.number, cursor.seen_record
        self._inputs: list[int] = []  # appended here, read by the shard writer's thread
        self._cursors: list[Cursor] = []
        self._lock = threading.Lock()

    def begin(self, span: TextSpan, first_input: int, numbers: int, saw_record: bool,
              lacks_field: int | None) -> int:
        """Enter the next span; returns the file's line or row number of its first."""
        if span.file != self._file:
            self._file, self._number, self._seen = span.file, 0, False
        base = self._number
        if lacks_field is not None and not self._seen:
            where = f"{self.files[span.file]}:{base + lacks_field + 1}"
            raise DataError(f"{where}: no field {self.text_field!r} (choose one with --field)")
        with self._lock:
            self._inputs.append(first_input)
            self._cursors.append(Cursor(span.file, span.start, base, self._seen, first_input))
        self._seen = self._seen or saw_record
        self._number += numbers
        return base

    def cursor_at(self, inputs_done: int) -> dict[str, Any] | None:
        """The cursor of the last span begun at or before input `inputs_done`."""
        with self._lock:
            at = bisect.bisect_right(self._inputs, inputs_done) - 1
            return self._cursors[at].to_json() if at >= 0 else None

    def describe(self, span: TextSpan, number: int, reason: str | None) -> tuple[str, str]:
        """(where, reason) of a reject: file and line or row, and why."""
        path = self.files[span.file]
        if span.kind == "parquet":
            where, place = f"{path}#row{number}", f"{path.name} row {number}"
        elif span.kind == "file":
            where, place = str(path), str(path)
        else:
            where, place = f"{path}:{number + 1}", f"{path.name} line {number + 1}"
        return where, f"{place}: {reason}" if reason else "empty document"
