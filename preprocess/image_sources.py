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
from preprocess.input_files import require_regular_file

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm",
                  ".pgm", ".jfif"}
RESERVED_COLUMNS = {"image", "label", "height", "width", "path"}


@dataclass(frozen=True)
class ImageItem:
    path: Path      # absolute
    source: str     # as the user knows it: relative to SRC
    label: int
    extras: tuple[Any, ...] = ()
    problem: str | None = None  # why it cannot be converted, when known before reading it


@dataclass(frozen=True)
class BadLine:
    """A manifest line that names no image: listed as a reject, never skipped."""

    source: str
    reason: str


@dataclass(frozen=True)
class ImageSource:
    items: tuple[ImageItem, ...]
    classes: tuple[str, ...] | None
    extra_columns: tuple[tuple[str, str], ...]  # (name, column type)


def list_images(src: Path, leave_out: Path | None = None) -> ImageSource:
    """The inputs SRC names; `leave_out` (OUT) is never one of them."""
    try:
        is_dir = src.is_dir()
        if not is_dir and not src.exists():
            raise ArgumentError(f"SRC {src} does not exist")
    except OSError as exc:  # a name too long, a loop of links
        raise ArgumentError(f"SRC {src}: {exc.strerror or exc}") from None
    if is_dir:
        from preprocess.image_folder import scan_image_folder  # builds on this module's types

        return scan_image_folder(src, leave_out)
    if src.suffix.lower() not in (".csv", ".jsonl", ".ndjson"):
        raise ArgumentError(f"SRC {src}: expected a directory (SRC/<class>/<file>) or a "
                            ".csv/.jsonl manifest")
    require_regular_file(src)
    return _from_records(src, _read_csv(src) if src.suffix.lower() == ".csv" else
                         _read_jsonl(src))


def _read_csv(src: Path) -> list[dict[str, Any]]:
    try:
        with open(src, newline="") as f:
            return list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ArgumentError(f"SRC {src}: unreadable CSV ({exc})") from None


def _read_jsonl(src: Path) -> list[dict[str, Any] | BadLine]:
    """Records in order; a line that is not a JSON object is kept as a BadLine (a reject)."""
    records: list[dict[str, Any] | BadLine] = []
    try:
        lines = src.read_text().splitlines()
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
            records.append(record)
        else:
            what = "no 'path'" if isinstance(record, dict) else "not a JSON object"
            records.append(BadLine(f"{src.name}:{number}", f"{src.name} line {number}: {what}"))
    return records


def _from_records(src: Path, records: list[dict[str, Any] | BadLine]) -> ImageSource:
    good = [r for r in records if not isinstance(r, BadLine)]
    if not good:
        raise ArgumentError(f"SRC {src} lists no images"
                            + (f" ({records[0].source}: {records[0].reason})" if records else ""))
    if "path" not in good[0]:
        raise ArgumentError(f"SRC {src}: needs a 'path' column (and usually 'label')")
    extra_names = [k for k in good[0] if k not in ("path", "label")]
    clash = RESERVED_COLUMNS.intersection(extra_names)
    if clash:
        raise ArgumentError(f"SRC {src}: column name {sorted(clash)[0]!r} is reserved")
    labels, classes = _labels(src, [r.get("label") for r in good])
    extras = {name: _typed_column(src, name, [r.get(name) for r in good])
              for name in extra_names}
    items = []
    row = 0  # index among the good records, which labels and extras are aligned with
    for record in records:
        if isinstance(record, BadLine):
            items.append(ImageItem(src, record.source, -1, problem=record.reason))
            continue
        path = str(record["path"])
        items.append(ImageItem((src.parent / path).resolve(), path, labels[row],
                               tuple(extras[name][1][row] for name in extra_names)))
        row += 1
    return ImageSource(tuple(items), classes, tuple((n, extras[n][0]) for n in extra_names))


def _labels(src: Path, raw: list[Any]) -> tuple[list[int], tuple[str, ...] | None]:
    """Integer labels are kept; names are mapped to their index in sorted order."""
    if all(v is None or v == "" for v in raw):
        return [-1] * len(raw), None
    if any(v is None or v == "" for v in raw):
        raise DataError(f"{src}: row {next(i for i, v in enumerate(raw) if v in (None, ''))} "
                        "has no label while others do")
    try:
        return [int(v) for v in raw], None
    except (TypeError, ValueError):
        classes = tuple(sorted({str(v) for v in raw}))
        index = {c: i for i, c in enumerate(classes)}
        return [index[str(v)] for v in raw], classes


def _typed_column(src: Path, name: str, values: list[Any]) -> tuple[str, list[Any]]:
    """Extras become int64 or float64 when every value parses as one, else strings."""
    for kind, parse in (("int64", _strict_int), ("float64", float)):
        try:
            return kind, [parse(v) for v in values]
        except (TypeError, ValueError):
            continue
    return "string", ["" if v is None else str(v) for v in values]


def _strict_int(value: Any) -> int:
    """int() that refuses to truncate: 0.5 and "0.5" are not integers."""
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(value)
    if isinstance(value, bool):
        raise TypeError(value)
    return int(value)
