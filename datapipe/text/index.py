"""The per-document length index of a text dataset, cached beside the shards.

Lengths come from the `length` column (never from token payloads); the cache, named after the
manifest's hash, makes the next start-up a single small file read.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from datapipe.format.dataset import Dataset
from datapipe.format.hashing import hash_file
from datapipe.format.manifest import MANIFEST_NAME


def cache_path(directory: Path) -> Path:
    digest = hash_file(directory / MANIFEST_NAME).split(":")[1][:16]
    return directory / f".datapipe-lengths-{digest}.npy"


def document_lengths(dataset: Dataset) -> np.ndarray:
    """int64 length of every document, in global order."""
    path = cache_path(dataset.directory)
    if path.is_file():
        lengths = np.load(path)
        if len(lengths) == len(dataset):
            return lengths
    lengths = dataset.scalar("length").astype(np.int64)
    _save_quietly(path, lengths)
    return lengths


def _save_quietly(path: Path, lengths: np.ndarray) -> None:
    """Best effort: a read-only dataset directory just means no cache."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.save(f, lengths)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
