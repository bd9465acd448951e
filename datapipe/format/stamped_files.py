"""The node-wide derived files (the length index, the scalar maps, the bucket index): a file
with a JSON summary beside it, stamped with the file's size and mtime when its content was
last found to match its name, and written whole or not at all."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Protocol, TypeVar

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


class Stamped(Protocol):
    """A derived file's summary: a frozen dataclass with the stamp of its last match."""

    checked: tuple[int, int] | None

    def to_json(self) -> str: ...


S = TypeVar("S", bound=Stamped)


def load_intact(path: Path, read_summary: Callable[[str], S],
                fits: Callable[[np.ndarray, S], bool], digest: Callable[[np.ndarray], str],
                always_hash: bool) -> tuple[np.ndarray, S] | None:
    """A derived .npy file, mapped, with its summary, if it holds what its name and summary
    say and `fits` what the caller expects (else the file and summary are removed). Its content
    is hashed when the file changed since it last matched, or `always_hash`."""
    try:
        values = load_mapped(path)
        summary = read_summary(summary_path(path).read_text())
        stamp = file_stamp(path)
    except (OSError, ValueError, EOFError, TypeError, KeyError):
        values = summary = None
    if values is not None and summary is not None and fits(values, summary):
        if not always_hash and summary.checked == stamp:
            return values, summary
        if path.stem.endswith(f"-{digest(values)}"):
            summary = replace(summary, checked=stamp)  # type: ignore[type-var]
            write_atomically(summary_path(path), summary.to_json().encode())
            return values, summary
    for stale in (path, summary_path(path)):
        with contextlib.suppress(OSError):  # another process may have removed it first
            stale.unlink()
    return None


def save_quietly(path: Path, values: np.ndarray, summary: Stamped) -> bool:
    """A derived .npy file and its summary, best effort (False: not saved; a read-only
    dataset directory just means no cache). The summary goes first, stamped with the file it
    describes (os.replace keeps the stamp), so the file is never there without it."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.save(f, values)
        stamped = replace(summary, checked=file_stamp(tmp))  # type: ignore[type-var]
        if not write_atomically(summary_path(path), stamped.to_json().encode()):
            raise OSError
        os.replace(tmp, path)
        return True
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
