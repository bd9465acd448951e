"""Where images come from: an ImageFolder tree or a CSV/JSONL manifest of `path,label[,extras]`.

Every input is listed, in a fixed order; one already known to be unusable (a bad manifest line,
a dangling symlink, ...) carries its `problem` and becomes a reject with that reason.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datapipe.errors import ArgumentError, DataError
from preprocess.image_folder import scan_image_folder
from preprocess.image_inputs import ImageItem, ImageSource
from preprocess.input_files import TEXT_ENCODING, require_regular_file, split_lines

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm",
                  ".pgm", ".jfif"}
RESERVED_COLUMNS = {"image", "label", "height", "width", "path"}
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


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


def list_images(src: Path, leave_out: Path | None = None) -> ImageSource:
    """The inputs SRC names; `leave_out` (OUT) is never one of them."""
    try:
        is_dir = src.is_dir()
        if not is_dir and not src.exists():
            raise ArgumentError(f"SRC {src} does not exist")
    except OSError as exc:  # a name too long, a loop of links
        raise ArgumentError(f"SRC {src}: {exc.strerror or exc}") from None
    if is_dir:
        return scan_image_folder(src, leave_out)
    if src.suffix.lower() not in (".csv", ".jsonl", ".ndjson"):
        raise ArgumentError(f"SRC {src}: expected a directory (SRC/<class>/<file>) or a "
                            ".csv/.jsonl manifest")
    require_regular_file(src)
    return _from_records(src, _read_csv(src) if src.suffix.lower() == ".csv" else
                         _read_jsonl(src))


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
        lines = split_lines(src.read_text(encoding=TEXT_ENCODING))
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


def _from_records(src: Path, records: list[Row | BadLine]) -> ImageSource:
    rows = [r for r in records if isinstance(r, Row)]
    if not rows:
        raise ArgumentError(f"SRC {src} lists no images"
                            + (f" ({records[0].reason})" if records else ""))
    if "path" not in rows[0].values:
        raise ArgumentError(f"SRC {src}: needs a 'path' column (and usually 'label')")
    extra_names = [k for k in rows[0].values if k not in ("path", "label")]
    clash = RESERVED_COLUMNS.intersection(extra_names)
    if clash:
        raise ArgumentError(f"SRC {src}: column name {sorted(clash)[0]!r} is reserved")
    labels, classes = _labels(src, rows)
    extras = {name: _typed_column([r.values.get(name) for r in rows]) for name in extra_names}
    items = []
    index = 0  # among the rows, which labels and extras are aligned with
    for record in records:
        if isinstance(record, BadLine):
            items.append(ImageItem(src, record.source, -1, problem=record.reason))
            continue
        path, label = str(record.values["path"]), labels[index]
        items.append(ImageItem((src.parent / path).resolve(), path, -1 if label is None else label,
                               tuple(extras[name][1][index] for name in extra_names),
                               problem=_label_problem(src, record, label)))
        index += 1
    return ImageSource(tuple(items), classes, tuple((n, extras[n][0]) for n in extra_names))


def _labels(src: Path, rows: list[Row]) -> tuple[list[int | None], tuple[str, ...] | None]:
    """Integer labels are kept (None: beyond int64, a reject); names are mapped to their index
    in sorted order."""
    raw = [row.values.get("label") for row in rows]
    missing = [row.line for row, v in zip(rows, raw, strict=True) if v is None or v == ""]
    if len(missing) == len(rows):
        return [-1] * len(raw), None
    if missing:
        raise DataError(f"{src} line {missing[0]}: no label, while other lines have one")
    try:
        integers = [_strict_int(v) for v in raw]  # 1.5 is a class name, never label 1
    except (TypeError, ValueError, OverflowError):  # OverflowError: JSON's Infinity
        classes = tuple(sorted({str(v) for v in raw}))
        index = {c: i for i, c in enumerate(classes)}
        return [index[str(v)] for v in raw], classes
    return [v if _fits_int64(v) else None for v in integers], None


def _label_problem(src: Path, row: Row, label: int | None) -> str | None:
    if label is not None:
        return None
    return f"{src.name} line {row.line}: label {row.values['label']} is beyond the int64 range"


def _typed_column(values: list[Any]) -> tuple[str, list[Any]]:
    """Extras become int64 or float64 when every value parses as one, else strings. Integers
    beyond int64 stay strings: float64 would round their digits away."""
    try:
        integers = [_strict_int(v) for v in values]
    except (TypeError, ValueError):
        integers = None
    if integers is not None:
        if all(map(_fits_int64, integers)):
            return "int64", integers
        return "string", [str(v) for v in values]
    try:
        return "float64", [float(v) for v in values]
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond any float
        return "string", ["" if v is None else str(v) for v in values]


def _fits_int64(value: int) -> bool:
    return INT64_MIN <= value <= INT64_MAX


def _strict_int(value: Any) -> int:
    """int() that refuses to truncate: 0.5 and "0.5" are not integers."""
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(value)
    if isinstance(value, bool):
        raise TypeError(value)
    return int(value)
