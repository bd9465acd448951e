"""Scan an ImageFolder tree (SRC/<class>/...) into inputs, each a file to convert or a reject.

Nothing the scan meets is dropped unseen. Every entry under SRC becomes one input, in sorted
path order (so input indices, and the output bytes, depend on the tree alone):
- a regular file, whatever its name, is a file to convert (one that is not an image is rejected
  once its first bytes are read);
- a symlink is followed, to a file or a folder; a dangling one is rejected, and so is a folder
  link that leads back to a folder it sits in (a loop: SRC, or a folder holding it, like /);
- every folder is walked once, known by (st_dev, st_ino): a second way to one already walked
  (another link, a bind mount) is rejected, naming where it was walked;
- a link to a folder SRC also holds by its real path is rejected, wherever the sorted walk
  meets it: the folder is walked where it really is, under its own class (a link
  `class_0/sib -> ../class_1` met first would otherwise label every image of class_1 as
  class_0); a link to a folder outside SRC is walked, under the class of the link;
- an entry on a special filesystem (/proc, /sys, /dev, cgroups, ...) is rejected without being
  read or walked;
- a hidden entry (name starting with '.') is rejected without being read or descended into, so
  `.DS_Store` or `.git` are listed, not converted;
- a folder that cannot be listed, a FIFO, socket or device, and a file directly in SRC (outside
  any class folder) are rejected.
OUT, and any folder holding a datapipe dataset or a conversion in progress, is left out: its
files are shards, not inputs, and OUT inside SRC must not become a class on the next run.
Names that are not valid UTF-8 are kept: `source` writes each undecodable byte as `\\xNN`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from datapipe.errors import ArgumentError
from preprocess.filesystems import special_devices
from preprocess.image_inputs import ImageItem, ImageSource, alternatives
from preprocess.input_files import is_datapipe_output
from preprocess.sidecars import attach_sidecars

HIDDEN = "hidden (name starts with '.'): not read"
LOOP = "symlink loop: leads back to a folder it is in; not followed"
# How a link to a folder inside SRC ends its reject (the summary counts these).
LINKED_FOLDER = "which SRC holds by its real path: walked there, under its own class, not here"
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device"}
Identity = tuple[int, int]  # (st_dev, st_ino) of a folder: the same folder however reached
Pending = tuple[Path, int, bool]  # path, label, in a class folder


def scan_image_folder(src: Path, leave_out: Path | None = None,
                      caption_field: str | None = None) -> ImageSource:
    """The inputs under SRC; `leave_out` (OUT) is not scanned, wherever it is. With
    `caption_field` (extensions such as "txt"), each image's caption is read from the sidecar
    file beside it (`cat.jpg` -> `cat.txt`), which is then no input of its own."""
    root = Path(os.path.abspath(src))
    try:
        walk = _Walk(root, leave_out)
        top = [e for e in _sorted_entries(root) if not walk.leaves_out(Path(e.path))]
    except OSError as exc:
        raise ArgumentError(f"SRC {src}: cannot list folder ({_why(exc)})") from None
    classes = [e.name for e in top if not e.name.startswith(".") and _is_dir(e)]
    if not classes:
        raise ArgumentError(f"SRC {src} has no class folders (expected SRC/<class>/<file>)")
    labels = {name: label for label, name in enumerate(classes)}
    items = list(walk.items([(Path(e.path), labels.get(e.name, -1), e.name in labels)
                             for e in top]))
    if caption_field is not None:
        items = attach_sidecars(items, alternatives(caption_field))
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


class _Walk:
    """One scan's memory: the folders walked (each once), the special filesystems, OUT."""

    def __init__(self, root: Path, leave_out: Path | None) -> None:
        self.root = root
        self.real_root = Path(os.path.realpath(root))
        self.special = special_devices()
        # SRC and every folder holding it count as walked: a link to one of them is a loop
        # (a link to / would otherwise walk the whole machine). None: no source inside SRC.
        holding = map(_stat, {root, *root.parents, *Path(os.path.realpath(root)).parents})
        self.walked: dict[Identity, str | None] = {
            _identity(info): None for info in holding if isinstance(info, os.stat_result)}
        out = _stat(leave_out) if leave_out is not None else None
        self.out = _identity(out) if isinstance(out, os.stat_result) else None

    def leaves_out(self, folder: Path) -> bool:
        """OUT, or a datapipe dataset or conversion: shards, not inputs."""
        return self._is_out(_stat(folder)) or is_datapipe_output(folder)

    def items(self, entries: list[Pending]) -> Iterator[ImageItem]:
        """Depth first in sorted order, with a stack, not recursion: a tree may be deep."""
        stack = entries[::-1]
        while stack:
            visited = self._visit(*stack.pop())
            if isinstance(visited, ImageItem):
                yield visited
            else:
                stack.extend(reversed(visited))

    def _visit(self, path: Path, label: int, in_class: bool) -> ImageItem | list[Pending]:
        """One input for `path`, or the entries of the folder it is, to visit next."""
        source = display_name(str(path.relative_to(self.root)))
        info = _stat(path)
        if self._is_out(info):
            return []  # hidden or not: the scan of a first run, before OUT existed, agrees
        if path.name.startswith("."):
            problem: str | None = HIDDEN
        elif isinstance(info, OSError):
            problem = _unreachable(path, info)
        else:
            problem = self._problem(path, info, source, in_class)
        if problem is not None or not stat.S_ISDIR(info.st_mode):
            return ImageItem(path, source, label, problem=problem)
        return self._folder(path, source, label, info)

    def _problem(self, path: Path, info: os.stat_result, source: str,
                 in_class: bool) -> str | None:
        is_dir = stat.S_ISDIR(info.st_mode)
        if info.st_dev in self.special:
            return (f"on a special filesystem ({self.special[info.st_dev]}), which holds no "
                    f"image files: not {'walked' if is_dir else 'read'}")
        if not is_dir:
            return _file_problem(info, in_class)
        walked = _identity(info) in self.walked
        walked_as = self.walked.get(_identity(info))
        if walked and (walked_as is None or source.startswith(walked_as + "/")):
            return LOOP
        real = self._real_place(path)
        if real is not None:
            return f"a link to {real}, {LINKED_FOLDER}"
        if walked:
            return f"the same folder as {walked_as}, walked already (each folder is walked once)"
        return None

    def _real_place(self, path: Path) -> str | None:
        """Where the walk meets the folder `path` leads to by its real path, when that is
        inside SRC and `path` is not it (a link, or a folder under one); else None."""
        try:
            real = Path(os.path.realpath(path)).relative_to(self.real_root)
        except ValueError:
            return None  # outside SRC: this link is the only way to it
        if real == path.relative_to(self.root) or any(p.startswith(".") for p in real.parts):
            return None  # its own place, or one the walk does not enter (hidden)
        return display_name(str(real))

    def _folder(self, path: Path, source: str, label: int,
                info: os.stat_result) -> ImageItem | list[Pending]:
        if is_datapipe_output(path):
            return []
        try:
            entries = _sorted_entries(path)
        except OSError as exc:
            return ImageItem(path, source, label, problem=f"cannot list folder ({_why(exc)})")
        self.walked[_identity(info)] = source
        return [(Path(e.path), label, True) for e in entries]

    def _is_out(self, info: os.stat_result | OSError) -> bool:
        return isinstance(info, os.stat_result) and _identity(info) == self.out


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


def _stat(path: Path) -> os.stat_result | OSError:
    """The stat of what `path` leads to (symlinks followed), or why there is none."""
    try:
        return os.stat(path)
    except OSError as exc:
        return exc


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
