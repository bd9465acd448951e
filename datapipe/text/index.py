"""The per-document length index of a text dataset, cached beside the shards.

Lengths come from the `length` column (never from token payloads); the cache makes the next
start-up a single small file read. Its name carries the manifest's hash (a reconverted dataset
gets a new index) and a hash of its own content: a cache damaged on disk would plan token
ranges that cross documents, so one that no longer matches is rebuilt from the shards.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np

from datapipe.format.dataset import Dataset
from datapipe.format.hashing import hash_bytes


def _cache_prefix(dataset: Dataset) -> str:
    return f".datapipe-lengths-{dataset.manifest_digest().split(':')[1][:16]}-"


def _content_digest(lengths: np.ndarray) -> str:
    return hash_bytes(memoryview(np.ascontiguousarray(lengths))).split(":")[1][:16]


def document_lengths(dataset: Dataset) -> np.ndarray:
    """int64 length of every document, in global order."""
    prefix = _cache_prefix(dataset)
    directory = dataset.side_directory  # a remote dataset's is in the node's cache
    for path in directory.glob(f"{prefix}*.npy"):
        lengths = _load_intact(path, len(dataset))
        if lengths is not None:
            return lengths
    lengths = dataset.scalar("length").astype(np.int64)
    _save_quietly(directory / f"{prefix}{_content_digest(lengths)}.npy", lengths)
    return lengths


def _load_intact(path: Path, count: int) -> np.ndarray | None:
    """The cached lengths, if the file still holds what its name says (else it is removed)."""
    try:
        lengths = np.load(path)
    except (OSError, ValueError, EOFError):
        lengths = None
    if lengths is not None and lengths.dtype == np.int64 and len(lengths) == count \
            and path.stem.endswith(f"-{_content_digest(lengths)}"):
        return lengths
    with contextlib.suppress(OSError):  # another process may have removed it first
        path.unlink()
    return None


def _save_quietly(path: Path, lengths: np.ndarray) -> None:
    """Best effort: a read-only dataset directory just means no cache."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.save(f, lengths)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
