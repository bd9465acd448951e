"""The dataset manifest: one JSON file, written last, that makes a directory a dataset.

The format is specified in docs/FORMAT.md; bump FORMAT_VERSION on any incompatible change.
"""

from __future__ import annotations

import json
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datapipe.errors import DataError
from datapipe.format.hashing import HASH_ALGORITHM, is_hash
from datapipe.format.names import check_file_name
from datapipe.format.schema import Column
from datapipe.format.shard_formats import FORMAT_NAMES
from datapipe.wording import plural

FORMAT_NAME = "datapipe-shards"
FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
# The record each finished part of a parallel write leaves until merge_parts joins them.
PART_RECORD_PREFIX = ".datapipe-part-"


@dataclass(frozen=True)
class ShardInfo:
    """One shard as the manifest lists it. Its name is joined to the dataset's folder or URL
    and to the cache, its hash names its folder in the cache: both are checked here, so that
    a manifest can only name files of its own dataset."""

    name: str
    rows: int
    bytes: int
    hash: str

    def __post_init__(self) -> None:
        check_file_name(self.name, "shard name")
        for key in ("rows", "bytes"):
            value = getattr(self, key)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 0:
                raise DataError(f"shard {self.name!r}: {key} {value!r} is not a count")
        if not is_hash(self.hash):
            raise DataError(f"shard {self.name!r}: hash {self.hash!r} is not an "
                            f"{HASH_ALGORITHM} hash")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "rows": self.rows, "bytes": self.bytes, "hash": self.hash}

    @classmethod
    def from_json(cls, obj: dict) -> ShardInfo:
        return cls(name=obj["name"], rows=obj["rows"], bytes=obj["bytes"], hash=obj["hash"])


@dataclass(frozen=True)
class Manifest:
    """What a dataset holds. `kind` is "images" or "text"; `settings` records the conversion."""

    kind: str
    shard_format: str
    columns: tuple[Column, ...]
    shards: tuple[ShardInfo, ...]
    settings: dict[str, Any] = field(default_factory=dict)
    tokenizer: dict[str, Any] | None = None
    classes: tuple[str, ...] | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    version: int = FORMAT_VERSION
    # The file's "num_samples" as read (None: not read from a file). Readers count the shards'
    # rows; `datapipe verify` names a file whose count says otherwise.
    stated_samples: Any = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.shard_format not in FORMAT_NAMES:
            raise DataError(f"unknown shard format {self.shard_format!r}")

    @property
    def num_samples(self) -> int:
        return sum(s.rows for s in self.shards)

    @property
    def total_bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    def column(self, name: str) -> Column:
        for col in self.columns:
            if col.name == name:
                return col
        raise DataError(f"dataset has no column {name!r} (columns: {self.column_names})")

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "version": self.version,
            "kind": self.kind,
            "shard_format": self.shard_format,
            "num_samples": self.num_samples,
            "columns": [c.to_json() for c in self.columns],
            "shards": [s.to_json() for s in self.shards],
            "settings": self.settings,
            "tokenizer": self.tokenizer,
            "classes": list(self.classes) if self.classes is not None else None,
            "stats": self.stats,
        }

    def to_bytes(self) -> bytes:
        return (json.dumps(self.to_json(), indent=1) + "\n").encode()

    def save(self, directory: str | Path) -> Path:
        """Write atomically (temp file, fsync, rename) so a reader never sees half a manifest."""
        path = Path(directory) / MANIFEST_NAME
        write_atomic(path, self.to_bytes())
        return path

    @classmethod
    def load(cls, directory: str | Path) -> Manifest:
        path = Path(directory) / MANIFEST_NAME
        if not Path(directory).is_dir():
            raise DataError(f"{directory}: no such dataset directory")
        if not path.is_file():
            parts = [p for p in Path(directory).iterdir() if p.name.startswith(PART_RECORD_PREFIX)]
            if parts:
                raise DataError(f"{directory}: holds {plural(len(parts), 'finished part')} of a "
                                "parallel write and no manifest yet; join them with "
                                f"datapipe.merge_parts({str(directory)!r})")
            raise DataError(f"{path}: missing; is this a finished datapipe dataset?")
        try:
            obj = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise DataError(f"{path}: unreadable manifest ({exc})") from None
        return cls.from_json(obj, source=str(path))

    @classmethod
    def from_json(cls, obj: dict, source: str = "manifest") -> Manifest:
        if not isinstance(obj, dict) or obj.get("format") != FORMAT_NAME:
            raise DataError(f"{source}: not a {FORMAT_NAME} manifest")
        version = obj.get("version")
        if version != FORMAT_VERSION:
            raise DataError(
                f"{source}: format version {version!r} is not supported by this datapipe "
                f"(reads version {FORMAT_VERSION}); reconvert or upgrade datapipe")
        try:
            classes = obj.get("classes")
            return cls(
                kind=obj["kind"],
                shard_format=obj["shard_format"],
                columns=tuple(Column.from_json(c) for c in obj["columns"]),
                shards=tuple(ShardInfo.from_json(s) for s in obj["shards"]),
                settings=obj.get("settings") or {},
                tokenizer=obj.get("tokenizer"),
                classes=tuple(classes) if classes is not None else None,
                stats=obj.get("stats") or {},
                version=version,
                stated_samples=obj.get("num_samples"),
            )
        except DataError as exc:  # a field that is there, but wrong: says which
            raise DataError(f"{source}: {exc}") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{source}: malformed manifest ({exc})") from None


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
