"""Small pieces of the node-wide derived files (the length index, the scalar maps): a file
with a JSON summary beside it, stamped with the file's size and mtime when its content was
last found to match its name, and written whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path


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
