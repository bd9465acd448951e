"""Small pieces of the node-wide derived files (the length index, the scalar maps): a file
with a JSON summary beside it, stamped with the file's size and mtime when its content was
last found to match its name, and written whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def summary_path(path: Path) -> Path:
    """Where a derived file's summary lies: beside it, as .json."""
    return path.with_suffix(".json")


def file_stamp(path: Path) -> tuple[int, int]:
    """(size, mtime_ns): what says a file was not rewritten since its content was checked."""
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def write_atomically(path: Path, data: bytes) -> bool:
    """`data` at `path` by a rename (a reader sees the old file or the new one); False when it
    could not be written (a read-only folder)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return True
    except OSError:
        tmp.unlink(missing_ok=True)
        return False


def load_mapped(path: Path) -> np.ndarray:
    """A .npy file memory-mapped read-only, as a plain ndarray over the mapping: np.memmap's
    subclass hooks cost microseconds on every index and slice of it, per batch on the
    training thread (the mapping stays open through the view's base)."""
    return np.load(path, mmap_mode="r").view(np.ndarray)


def mapped_file(array: np.ndarray) -> str | None:
    """The file an array from `load_mapped` maps, or None for an array in memory."""
    while array is not None:
        if isinstance(array, np.memmap):
            return array.filename
        array = array.base if isinstance(array.base, np.ndarray) else None
    return None
