"""Scan an ImageFolder tree (SRC/<class>/...) into inputs, each a file to convert or a reject.

Nothing the scan meets is dropped unseen. Every entry under SRC becomes one input, in sorted
path order (so input indices, and the output bytes, depend on the tree alone):
- a regular file, whatever its name, is a file to convert (one that is not an image is rejected
  once its first bytes are read);
- a symlink is followed, to a file or a folder; a dangling one is rejected, and so is a folder
  link that leads back to a folder it sits in (a loop);
- a hidden entry (name starting with '.') is rejected without being read or descended into, so
  `.DS_Store` or `.git` are listed, not converted;
- a folder that cannot be listed, a FIFO, socket or device, and a file directly in SRC (outside
  any class folder) are rejected.
Names that are not valid UTF-8 are kept: `source` writes each undecodable byte as `\\xNN`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from datapipe.errors import ArgumentError
from preprocess.image_sources import ImageItem, ImageSource

HIDDEN = "hidden (name starts with '.'): not read"
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device"}
Identity = tuple[int, int]  # (st_dev, st_ino) of a folder, to tell a symlink loop
Pending = tuple[Path, int, frozenset[Identity], bool]  # path, label, folders it is in, in a class


def scan_image_folder(src: Path) -> ImageSource:
    root = Path(os.path.abspath(src))
    try:
        top = _sorted_entries(root)
        ancestors = frozenset({_identity(os.stat(root))})
    except OSError as exc:
        raise ArgumentError(f"SRC {src}: cannot list folder ({_why(exc)})") from None
    classes = [e.name for e in top if not e.name.startswith(".") and _is_dir(e)]
    if not classes:
        raise ArgumentError(f"SRC {src} has no class folders (expected SRC/<class>/<file>)")
    labels = {name: label for label, name in enumerate(classes)}
    items = list(_walk(root, [(Path(e.path), labels.get(e.name, -1), ancestors, e.name in labels)
                              for e in top]))
    if all(item.problem for item in items):
        first = f" ({items[0].source}: {items[0].problem})" if items else ""
        raise ArgumentError(f"SRC {src} holds no files under its class folders{first}")
    return ImageSource(tuple(items), tuple(display_name(c) for c in classes), ())


def display_name(name: str) -> str:
    """`name` as text: bytes that were not UTF-8 (surrogate-escaped by os) become `\\xNN`."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")
    return name


def _walk(root: Path, entries: list[Pending]) -> Iterator[ImageItem]:
    """Depth first in sorted order, with a stack rather than recursion: a tree may be deep."""
    stack = entries[::-1]
    while stack:
        visited = _visit(root, *stack.pop())
        if isinstance(visited, ImageItem):
            yield visited
        else:
            stack.extend(reversed(visited))


def _visit(root: Path, path: Path, label: int, ancestors: frozenset[Identity],
           in_class: bool) -> ImageItem | list[Pending]:
    """One input for `path`, or the entries of the folder it is, to visit next."""
    source = display_name(str(path.relative_to(root)))
    if path.name.startswith("."):
        return ImageItem(path, source, label, problem=HIDDEN)
    try:
        info = os.stat(path)  # follows symlinks
    except OSError as exc:
        return ImageItem(path, source, label, problem=_unreachable(path, exc))
    if not stat.S_ISDIR(info.st_mode):
        return ImageItem(path, source, label, problem=_file_problem(info, in_class))
    if _identity(info) in ancestors:
        return ImageItem(path, source, label,
                         problem="symlink loop: leads back to a folder it is in; not followed")
    try:
        entries = _sorted_entries(path)
    except OSError as exc:
        return ImageItem(path, source, label, problem=f"cannot list folder ({_why(exc)})")
    inside = ancestors | {_identity(info)}
    return [(Path(e.path), label, inside, True) for e in entries]


def _file_problem(info: os.stat_result, in_class: bool) -> str | None:
    if not stat.S_ISREG(info.st_mode):
        return f"not a regular file but {_KINDS.get(stat.S_IFMT(info.st_mode), 'special')}"
    if not in_class:
        return "not in a class folder (expected SRC/<class>/<file>)"
    return None


def _sorted_entries(folder: Path) -> list[os.DirEntry]:
    with os.scandir(folder) as it:
        return sorted(it, key=lambda e: e.name)


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()  # follows symlinks; False for a dangling one
    except OSError:
        return False


def _identity(info: os.stat_result) -> Identity:
    return info.st_dev, info.st_ino


def _unreachable(path: Path, exc: OSError) -> str:
    try:
        target = display_name(os.readlink(path))
    except OSError:
        return f"cannot stat ({_why(exc)})"
    if isinstance(exc, FileNotFoundError):
        return f"broken symlink: its target {target} does not exist"
    return f"symlink to {target} cannot be followed ({_why(exc)})"


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)
