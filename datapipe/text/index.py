"""The per-document length index of a text dataset, cached beside the shards.

Lengths come from the `length` column (never from token payloads); the cache makes the next
start-up a memory map of one file: its pages are the page cache's, shared by every rank and
worker on the node, not private memory of each (Megatron's document index is kept the same
way). Its name carries the manifest's hash (a reconverted dataset gets a new index) and a hash
of its own content. A summary beside it (count, total tokens, longest) spares the planners a
pass over a billion lengths. An index whose size or summary no longer matches is rebuilt from
the shards; with verify="open" its content is hashed too (a damaged index would plan token
ranges that cross documents).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datapipe.format.dataset import Dataset
from datapipe.format.hashing import hash_bytes


@dataclass(frozen=True)
class LengthSummary:
    count: int
    total: int    # tokens of every document
    longest: int  # tokens of the longest (0 when there are none)

    @classmethod
    def of(cls, lengths: np.ndarray) -> LengthSummary:
        return cls(len(lengths), int(lengths.sum(dtype=np.int64)),
                   int(lengths.max()) if len(lengths) else 0)


def _cache_prefix(dataset: Dataset) -> str:
    return f".datapipe-lengths-{dataset.manifest_digest().split(':')[1][:16]}-"


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
    if _save_quietly(path, lengths, summary):
        found = _load_intact(path, len(dataset), False)
        if found is not None:
            return found
    return lengths, summary


def _summary_path(path: Path) -> Path:
    return path.with_suffix(".json")


def _load_intact(path: Path, count: int,
                 hash_content: bool) -> tuple[np.ndarray, LengthSummary] | None:
    """The cached lengths, if the file holds what its name and summary say (else removed)."""
    try:
        lengths = np.load(path, mmap_mode="r")
        summary = LengthSummary(**json.loads(_summary_path(path).read_text()))
    except (OSError, ValueError, EOFError, TypeError):
        lengths = summary = None
    if lengths is not None and summary is not None and lengths.dtype == np.int64 \
            and len(lengths) == count == summary.count \
            and (not hash_content or path.stem.endswith(f"-{_content_digest(lengths)}")):
        return lengths, summary
    for stale in (path, _summary_path(path)):
        with contextlib.suppress(OSError):  # another process may have removed it first
            stale.unlink()
    return None


def _save_quietly(path: Path, lengths: np.ndarray, summary: LengthSummary) -> bool:
    """Best effort (False: not saved): a read-only dataset directory just means no cache. The
    summary is written first, so an index file is never there without its summary."""
    written = []
    try:
        for target, write in ((_summary_path(path), lambda f: f.write(
                json.dumps(summary.__dict__).encode())), (path, lambda f: np.save(f, lengths))):
            tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
            written.append(tmp)
            with open(tmp, "wb") as f:
                write(f)
            os.replace(tmp, target)
        return True
    except OSError:
        for tmp in written:
            tmp.unlink(missing_ok=True)
        return False
