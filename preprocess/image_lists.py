"""CSV and JSONL lists of images (`path,label[,extras]`), read as people save them.

A line that names no image (a row of the wrong width, a line that is not a JSON object with a
path) is listed as an input with its `problem`, which becomes a reject naming the list and line.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datapipe.errors import ArgumentError, DataError
from preprocess.image_columns import check_extra_names, class_labels, typed_column
from preprocess.image_inputs import ImageItem, ImageSource, alternatives
from preprocess.input_files import (
    TEXT_ENCODING,
    require_regular_file,
    split_jsonl_lines,
)

LIST_SUFFIXES = (".csv", ".jsonl", ".ndjson")


@dataclass(frozen=True)
class Row:
    """A manifest line that names an image, and where it starts."""

    line: int
    values: dict[str, Any]


@dataclass(frozen=True)
class BadLine:
    """A manifest line that names no image: listed as a reject, never skipped."""

    source: str
    reason: str


def read_image_list(src: Path, caption_field: str | None = None) -> ImageSource:
    """The images a .csv or .jsonl list names, in its order; each with its `caption_field`
    value (the first of its alternatives a line has) when captions are read."""
    require_regular_file(src)
    return _from_records(src, _read_csv(src) if src.suffix.lower() == ".csv" else
                         _read_jsonl(src), alternatives(caption_field or ""))


def _read_csv(src: Path) -> list[Row | BadLine]:
    try:
        with open(src, newline="", encoding=TEXT_ENCODING) as f:
            return _csv_rows(src, csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ArgumentError(f"SRC {src}: unreadable CSV ({exc})") from None


def _csv_rows(src: Path, reader: Any) -> list[Row | BadLine]:
    """Rows under the header, each with the line it starts on; a row with more or fewer fields
    than the header names no image for sure: a BadLine."""
    header = next((fields for fields in reader if fields), [])  # blank lines before it
    _check_header(src, header, reader.line_num)
    rows: list[Row | BadLine] = []
    line = reader.line_num
    for fields in reader:
        number, line = line + 1, reader.line_num
        if not fields:
            continue  # a blank line
        if len(fields) == len(header):
            rows.append(Row(number, dict(zip(header, fields, strict=True))))
        else:
            rows.append(BadLine(f"{src.name}:{number}", f"{src.name} line {number}: "
                                f"{_fields(len(fields))}, the header has {len(header)}"))
    return rows


def _fields(count: int) -> str:
    return f"{count} field{'' if count == 1 else 's'}"


def _check_header(src: Path, header: list[str], line: int) -> None:
    for position, name in enumerate(header, 1):
        if not name:
            raise ArgumentError(f"SRC {src} line {line}: column {position} of the header has "
                                "no name")
        if header.index(name) != position - 1:
            raise ArgumentError(f"SRC {src} line {line}: the header names {name!r} twice")


def _read_jsonl(src: Path) -> list[Row | BadLine]:
    """Records in order; a line that is not a JSON object with a path is a BadLine (a reject)."""
    records: list[Row | BadLine] = []
    try:
        # Bytes decoded, not read_text: text mode would turn each bare \r into a line end.
        lines = split_jsonl_lines(src.read_bytes().decode(TEXT_ENCODING))
    except (OSError, UnicodeDecodeError) as exc:
        raise ArgumentError(f"SRC {src}: unreadable ({exc})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict) and "path" in record:
            records.append(Row(number, record))
        else:
            what = "no 'path'" if isinstance(record, dict) else "not a JSON object"
            records.append(BadLine(f"{src.name}:{number}", f"{src.name} line {number}: {what}"))
    return records


def _from_records(src: Path, records: list[Row | BadLine],
                  caption_fields: tuple[str, ...]) -> ImageSource:
    rows = [r for r in records if isinstance(r, Row)]
    if not rows:
        raise ArgumentError(f"SRC {src} lists no images"
                            + (f" ({records[0].reason})" if records else ""))
    if "path" not in rows[0].values:
        raise ArgumentError(f"SRC {src}: needs a 'path' column (and usually 'label')")
    extra_names = [k for k in rows[0].values if k not in ("path", "label", *caption_fields)]
    check_extra_names(src, extra_names)
    labels, classes = _labels(src, rows)
    extras = {name: typed_column([r.values.get(name) for r in rows]) for name in extra_names}
    items = []
    index = 0  # among the rows, which labels and extras are aligned with
    for record in records:
        if isinstance(record, BadLine):
            items.append(ImageItem(src, record.source, -1, problem=record.reason))
            continue
        path, label = str(record.values["path"]), labels[index]
        items.append(ImageItem((src.parent / path).resolve(), path, -1 if label is None else label,
                               tuple(extras[name][1][index] for name in extra_names),
                               problem=_label_problem(src, record, label),
                               caption=_caption(record, caption_fields)))
        index += 1
    return ImageSource(tuple(items), classes, tuple((n, extras[n][0]) for n in extra_names))


def _caption(row: Row, fields: tuple[str, ...]) -> Any:
    """The first caption field the line has (a CSV cell is text; a JSONL value may be a list
    of captions, or anything JSON holds); None: none."""
    return next((row.values[f] for f in fields if row.values.get(f) is not None), None)


def _labels(src: Path, rows: list[Row]) -> tuple[list[int | None], tuple[str, ...] | None]:
    """Integer labels are kept (None: beyond int64, a reject); names are mapped to their index
    in sorted order."""
    raw = [row.values.get("label") for row in rows]
    missing = [row.line for row, v in zip(rows, raw, strict=True) if v is None or v == ""]
    if len(missing) == len(rows):
        return [-1] * len(raw), None
    if missing:
        raise DataError(f"{src} line {missing[0]}: no label, while other lines have one")
    return class_labels(raw)


def _label_problem(src: Path, row: Row, label: int | None) -> str | None:
    if label is not None:
        return None
    return f"{src.name} line {row.line}: label {row.values['label']} is beyond the int64 range"
