"""Names a manifest gives, and the paths built from them.

A manifest is data, often from a bucket its reader does not own, and its names are joined to
the dataset's folder, its URL and the node's cache. Each must therefore be one plain file name:
it can then only name a file of the dataset itself, never a path elsewhere (docs/REMOTE.md).
Paths in the cache are checked once more, against where they resolve, before anything is
written there.
"""

from __future__ import annotations

from pathlib import Path

from datapipe.errors import DataError

_NAME_MAX = 255  # bytes in one file name on Linux filesystems


def name_problem(name: object) -> str | None:
    """Why `name` is not one plain file name (None: it is one)."""
    if not isinstance(name, str):
        return "is not a string"
    if not name:
        return "is empty"
    if name in (".", ".."):
        return "names a folder"
    if "/" in name or "\\" in name:
        return "holds a path separator"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "holds a control character"
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        return "is not valid Unicode"
    if size > _NAME_MAX:
        return f"is longer than {_NAME_MAX} bytes"
    return None


def check_file_name(name: object, what: str) -> str:
    """`name` itself when it is one plain file name; else a DataError saying why."""
    problem = name_problem(name)
    if problem is not None:
        raise DataError(f"{what} {name!r} {problem}: a manifest may name only files of its own "
                        "dataset")
    return name  # type: ignore[return-value]  # a str: name_problem said so


def inside(root: Path, path: Path) -> Path:
    """`path` when it resolves inside `root` (symbolic links followed); else a DataError.
    The defence behind the name checks: nothing is written outside the cache."""
    if not path.resolve().is_relative_to(root.resolve()):
        raise DataError(f"{path}: resolves outside {root}; refusing to write there")
    return path
