"""One image to convert, and the list of them in input order: what every source of images gives
(the folder scan, the CSV/JSONL lists, WebDataset tars, Parquet files), and how SRC is read."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datapipe.errors import ArgumentError
from preprocess.file_access import InputFile

SOURCE_KINDS = ("auto", "folder", "list", "tar", "parquet")
# Where captions are, unless --caption-field says: img2dataset's tar members (txt, or the json's
# caption), the Hub's caption columns, a list's field, kohya/diffusers sidecars (<image>.txt).
DEFAULT_CAPTION_FIELDS = {"tar": "txt;json:caption", "parquet": "caption;text",
                          "list": "caption", "folder": "txt"}


@dataclass(frozen=True)
class SourceOptions:
    """How SRC is read: its kind ("auto": told by what it is) and, for tars and Parquet, the
    fields holding the image and the label, each a list of alternatives separated by ';' (the
    first a sample has is taken; None: the source's defaults)."""

    kind: str = "auto"
    image_field: str | None = None
    label_field: str | None = None
    # Tars: a member extension or json:KEY; Parquet: a column; lists: a field; folders: the
    # extension of a sidecar file beside each image (<image stem>.txt). None: no captions.
    caption_field: str | None = None
    captions: bool = False  # read captions (from caption_field, else the source's default)

    def __post_init__(self) -> None:
        if self.kind not in SOURCE_KINDS:
            raise ArgumentError(f"--src-kind: {self.kind!r} is not one of {SOURCE_KINDS}")
        for option, value in (("--image-field", self.image_field),
                              ("--label-field", self.label_field),
                              ("--caption-field", self.caption_field)):
            if value is not None and not alternatives(value):
                raise ArgumentError(f"{option}: give a field name, got {value!r}")
        if self.caption_field is not None and not self.captions:
            raise ArgumentError("--caption-field needs --tokenizer: captions are stored as "
                                "token ids")

    def for_kind(self, kind: str) -> SourceOptions:
        """These options with the caption field a source of `kind` reads by default."""
        if not self.captions or self.caption_field is not None:
            return self
        return dataclasses.replace(self, caption_field=DEFAULT_CAPTION_FIELDS[kind])

    def check_fields_apply(self, kind: str) -> None:
        """Fields name parts of a sample: a folder or a list has none."""
        given = [o for o, v in (("--image-field", self.image_field),
                                ("--label-field", self.label_field)) if v is not None]
        if given and kind not in ("tar", "parquet"):
            raise ArgumentError(f"{given[0]} applies to tar and Parquet sources; SRC is a "
                                f"{'folder' if kind == 'folder' else 'CSV/JSONL list'}")


def alternatives(field: str) -> tuple[str, ...]:
    """'jpg;png' -> ('jpg', 'png'), as WebDataset's `to_tuple` reads alternatives."""
    return tuple(name.strip() for name in field.split(";") if name.strip())


@dataclass(frozen=True)
class TarMember:
    """Where an image lies in a tar: the byte range of its member's data."""

    file: int  # index in ImageSource.files
    offset: int
    size: int


@dataclass(frozen=True)
class ParquetRow:
    """Where an image lies in a Parquet file: a row of one of its row groups."""

    file: int  # index in ImageSource.files
    group: int
    row: int  # within the group


@dataclass(frozen=True)
class ImageItem:
    path: Path | None  # absolute; None for an image inside a file of many (see `member`)
    source: str     # as the user knows it: relative to SRC
    label: int
    extras: tuple[Any, ...] = ()
    problem: str | None = None  # why it cannot be converted, when known before reading it
    member: TarMember | ParquetRow | None = None
    caption: Any = None  # the caption field's raw value (preprocess/captions.py); None: none


@dataclass(frozen=True)
class ImageSource:
    items: tuple[ImageItem, ...]
    classes: tuple[str, ...] | None
    extra_columns: tuple[tuple[str, str], ...]  # (name, column type)
    files: tuple[InputFile, ...] = ()  # the tars or Parquet files that items' members are in
    root: str | None = None  # the folder workers must see; None when SRC is read by URL
    image_columns: tuple[str, ...] = ()  # of each Parquet file in `files`
    caption_field: str | None = None  # where captions were read from (None: not read)
