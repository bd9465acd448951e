"""Where images come from: an ImageFolder tree or a CSV/JSONL manifest of `path,label[,extras]`."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datapipe.errors import ArgumentError, DataError

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm",
                  ".pgm", ".jfif"}
RESERVED_COLUMNS = {"image", "label", "height", "width", "path"}


@dataclass(frozen=True)
class ImageItem:
    path: Path      # absolute
    source: str     # as the user knows it: relative to SRC
    label: int
    extras: tuple[Any, ...] = ()


@dataclass(frozen=True)
class ImageSource:
    items: tuple[ImageItem, ...]
    classes: tuple[str, ...] | None
    extra_columns: tuple[tuple[str, str], ...]  # (name, column type)


def list_images(src: Path) -> ImageSource:
    if not src.exists():
        raise ArgumentError(f"SRC {src} does not exist")
    if src.is_dir():
        return _image_folder(src)
    if src.suffix.lower() == ".csv":
        return _from_records(src, _read_csv(src))
    if src.suffix.lower() in (".jsonl", ".ndjson"):
        return _from_records(src, _read_jsonl(src))
    raise ArgumentError(f"SRC {src}: expected a directory (SRC/<class>/<file>) or a .csv/.jsonl "
                        "manifest")


def _image_folder(src: Path) -> ImageSource:
    classes = sorted(p.name for p in src.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise ArgumentError(f"SRC {src} has no class folders (expected SRC/<class>/<file>)")
    items = []
    for label, name in enumerate(classes):
        for path in sorted((src / name).rglob("*")):
            # Every regular file is an input, whatever its name: a file that is not an image is
            # rejected and listed, never skipped unseen. Hidden files are not inputs.
            if path.is_file() and not path.name.startswith("."):
                items.append(ImageItem(path.resolve(), str(path.relative_to(src)), label))
    if not items:
        raise ArgumentError(f"SRC {src} holds no files under its class folders")
    return ImageSource(tuple(items), tuple(classes), ())


def _read_csv(src: Path) -> list[dict[str, Any]]:
    try:
        with open(src, newline="") as f:
            return list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ArgumentError(f"SRC {src}: unreadable CSV ({exc})") from None


def _read_jsonl(src: Path) -> list[dict[str, Any]]:
    records = []
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
            raise DataError(f"{src}:{number}: not valid JSON") from None
        if not isinstance(record, dict):
            raise DataError(f"{src}:{number}: expected a JSON object")
        records.append(record)
    return records


def _from_records(src: Path, records: list[dict[str, Any]]) -> ImageSource:
    if not records:
        raise ArgumentError(f"SRC {src} lists no images")
    if "path" not in records[0]:
        raise ArgumentError(f"SRC {src}: needs a 'path' column (and usually 'label')")
    extra_names = [k for k in records[0] if k not in ("path", "label")]
    clash = RESERVED_COLUMNS.intersection(extra_names)
    if clash:
        raise ArgumentError(f"SRC {src}: column name {sorted(clash)[0]!r} is reserved")
    labels, classes = _labels(src, [r.get("label") for r in records])
    extras = {name: _typed_column(src, name, [r.get(name) for r in records])
              for name in extra_names}
    base = src.parent
    items = tuple(
        ImageItem((base / str(r["path"])).resolve(), str(r["path"]), labels[i],
                  tuple(extras[name][1][i] for name in extra_names))
        for i, r in enumerate(records))
    return ImageSource(items, classes, tuple((n, extras[n][0]) for n in extra_names))


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
