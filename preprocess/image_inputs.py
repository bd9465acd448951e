"""One image to convert, and the list of them in input order: what the folder scan
(image_folder.py) and the CSV/JSONL list reader (image_sources.py) both give."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ImageItem:
    path: Path      # absolute
    source: str     # as the user knows it: relative to SRC
    label: int
    extras: tuple[Any, ...] = ()
    problem: str | None = None  # why it cannot be converted, when known before reading it


@dataclass(frozen=True)
class ImageSource:
    items: tuple[ImageItem, ...]
    classes: tuple[str, ...] | None
    extra_columns: tuple[tuple[str, str], ...]  # (name, column type)
