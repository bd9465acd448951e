"""The per-document length index of a text dataset, cached beside the shards.

Lengths come from the `length` column (never from token payloads); the cache makes the next
start-up a memory map of one file: its pages are the page cache's, shared by every rank and
worker on the node, not private memory of each (Megatron's document index is kept the same
way). Its name carries the manifest's hash (a reconverted dataset gets a new index) and a hash
of its own content. A summary beside it (count, total tokens, longest) spares the planners a
pass over a billion lengths, and records the index file's size and modification time when its
content was last found to match its name: a damaged index would plan token ranges that cross
documents, so one whose file changed since is hashed again (and rebuilt if it no longer
matches); an unchanged one is not re-read at every start. verify="open" hashes it every time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datapipe.format.dataset import Dataset
from datapipe.format.hashing import hash_bytes
from datapipe.format.stamped_files import (
    load_intact,
    save_quietly,
)


@dataclass(frozen=True)
class LengthSummary:
    count: int
    total: int    # tokens of every document
    longest: int  # tokens of the longest (0 when there are none)
    checked: tuple[int, int] | None = None  # the index file's (size, mtime_ns) when it matched

    @classmethod
    def of(cls, lengths: np.ndarray) -> LengthSummary:
        return cls(len(lengths), int(lengths.sum(dtype=np.int64)),
                   int(lengths.max()) if len(lengths) else 0)

    @classmethod
    def joined(cls, parts: list[LengthSummary]) -> LengthSummary:
        """The summary of several datasets' documents, one after another."""
        return cls(sum(p.count for p in parts), sum(p.total for p in parts),
                   max((p.longest for p in parts), default=0))

    def to_json(self) -> str:
        return json.dumps({"count": self.count, "total": self.total, "longest": self.longest,
                           "checked": self.checked})

    @classmethod
    def from_json(cls, text: str) -> LengthSummary:
        fields = json.loads(text)
        checked = fields.pop("checked", None)
        return cls(**fields, checked=tuple(checked) if checked else None)



def _cache_prefix(dataset: Dataset) -> str:
    return f".datapipe-length-index-{dataset.manifest_digest().split(':')[1][:16]}-"


def _content_digest(lengths: np.ndarray) -> str:
    return hash_bytes(memoryview(np.ascontiguousarray(lengths))).split(":")[1][:16]


def document_lengths(dataset: Dataset) -> np.ndarray:
    """int64 length of every document, in global order (memory-mapped, read-only)."""
    return length_index(dataset)[0]


def length_index(dataset: Dataset) -> tuple[np.ndarray, LengthSummary]:
    """Every document's length (memory-mapped where the cache could be written) and their
    summary."""
    prefix = _cache_prefix(dataset)
    directory = dataset.side_directory  # a remote dataset's is in the node's cache
    for path in directory.glob(f"{prefix}*.npy"):
        found = _load_intact(path, len(dataset), dataset.verify == "open")
        if found is not None:
            return found
    lengths = dataset.scalar("length").astype(np.int64)
    summary = LengthSummary.of(lengths)
    path = directory / f"{prefix}{_content_digest(lengths)}.npy"
    if save_quietly(path, lengths, summary):
        found = _load_intact(path, len(dataset), False)
        if found is not None:
            return found
    return lengths, summary



def _load_intact(path: Path, count: int,
                 always_hash: bool) -> tuple[np.ndarray, LengthSummary] | None:
    """The cached lengths, if the file holds what its name and summary say (else removed)."""
    return load_intact(path, LengthSummary.from_json,
                       lambda lengths, summary: lengths.dtype == np.int64
                       and len(lengths) == count == summary.count,
                       _content_digest, always_hash)

