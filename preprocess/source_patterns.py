"""SRC as WebDataset and Hugging Face users write it, resolved to the files it names, in order.

SRC is one or several sources joined by `::` (WebDataset's convention). Each may hold brace
ranges and lists, expanded as WebDataset (braceexpand) does: `shard-{000000..000146}.tar`,
`{train,val}-*.parquet`; then it is a file, a folder (its files of the kind, recursively, in
sorted order), a glob, or any of these by URL (a URL folder lists the objects directly under
it; a URL glob matches names in its last part). Something that names no file is an error.
"""

from __future__ import annotations

import fnmatch
import glob
import itertools
import os
import re
from collections.abc import Iterable
from pathlib import Path

from datapipe.errors import ArgumentError
from datapipe.format.remote import is_url, local_path
from preprocess.file_access import InputFile, remote_listing, remote_size
from preprocess.input_files import is_datapipe_output, require_regular_file

SEPARATOR = "::"
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.(\d+))?$")
_GLOB = re.compile(r"[*?\[]")


def is_pattern(text: str) -> bool:
    """Whether SRC needs expanding (rather than naming one file or folder as written)."""
    return SEPARATOR in text or "{" in text or bool(_GLOB.search(text))


def expand_braces(text: str) -> list[str]:
    """Every string the braces of `text` stand for, in order: `{1..3}`, `{001..010}` (zero
    padded as written), `{a,b}`, nested. A brace with neither `..` nor `,` is kept as is."""
    start = text.find("{")
    while start != -1:
        end = _closing(text, start)
        if end is None:
            return [text]
        choices = _choices(text[start + 1:end])
        if choices is not None:
            rests = expand_braces(text[end + 1:])
            return [text[:start] + choice + rest for option in choices
                    for choice in expand_braces(option) for rest in rests]
        start = text.find("{", start + 1)
    return [text]


def _closing(text: str, start: int) -> int | None:
    depth = 0
    for at in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[at], 0)
        if depth == 0:
            return at
    return None


def _choices(body: str) -> list[str] | None:
    numbers = _RANGE.match(body)
    if numbers:
        first, last, step = numbers.group(1), numbers.group(2), int(numbers.group(3) or 1)
        width = max(len(first), len(last)) if first[0] == "0" or last[0] == "0" else 0
        direction = 1 if int(last) >= int(first) else -1
        values = range(int(first), int(last) + direction, direction * max(step, 1))
        return [str(v).zfill(width) for v in values]
    parts, depth, piece = [], 0, ""
    for char in body:
        depth += {"{": 1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(piece)
            piece = ""
        else:
            piece += char
    return [*parts, piece] if parts else None


def find_files(src: str, suffixes: tuple[str, ...]) -> tuple[InputFile, ...]:
    """The files SRC names; of a folder, a URL folder or a glob, those whose names end in one of
    `suffixes`. A file named as it is is taken whatever its name."""
    patterns = [p for part in src.split(SEPARATOR) for p in expand_braces(part.strip())]
    found: list[tuple[str, int, str]] = []  # (location, size, the folder it is named from)
    for pattern in patterns:
        matched = _remote_files(pattern, suffixes) if is_url(pattern) else \
            _local_files(str(local_path(pattern)), suffixes)
        if not matched:
            what = "/".join(suffixes)
            raise ArgumentError(f"SRC {pattern}" + (f" (from {src})" if pattern != src else "")
                                + f" matches no {what} files")
        found.extend(matched)
    base = _common_folder([folder for _, _, folder in found])
    return tuple(InputFile(location, _relative(location, base), size)
                 for location, size, _ in found)


def _local_files(pattern: str, suffixes: tuple[str, ...]) -> list[tuple[str, int, str]]:
    try:
        if os.path.lexists(pattern) or not _GLOB.search(pattern):
            return _local_path(Path(pattern), suffixes)
    except OSError as exc:  # a name too long, a loop of links
        raise ArgumentError(f"SRC {pattern}: {exc.strerror or exc}") from None
    matches = [Path(m) for m in sorted(glob.glob(pattern, recursive=True))]
    return [(os.path.abspath(m), size, os.path.abspath(m.parent))
            for m, size in _regular(m for m in matches if m.name.lower().endswith(suffixes))]


def _local_path(path: Path, suffixes: tuple[str, ...]) -> list[tuple[str, int, str]]:
    if not path.exists():
        raise ArgumentError(f"SRC {path} does not exist")
    if not path.is_dir():
        return [(os.path.abspath(path), size, os.path.abspath(path.parent))
                for _, size in _regular([path])]
    # A datapipe output inside the folder holds shards, not inputs (as `convert text` reads).
    files = sorted(p for p in path.rglob("*") if p.name.lower().endswith(suffixes)
                   and not is_datapipe_output(p.parent))
    return [(os.path.abspath(p), size, os.path.abspath(path)) for p, size in _regular(files)]


def _regular(paths: Iterable[Path]) -> list[tuple[Path, int]]:
    """Each path that is not a folder, with its size; a FIFO, a device or a dangling link is
    refused (reading one could block forever, or fail in a worker), never left out unseen."""
    found = []
    for path in paths:
        if not path.is_dir():
            require_regular_file(path)
            found.append((path, path.stat().st_size))
    return found


def _remote_files(pattern: str, suffixes: tuple[str, ...]) -> list[tuple[str, int, str]]:
    folder, _, name = pattern.rstrip("/").rpartition("/")
    if _GLOB.search(name):
        listing = remote_listing(folder)
        return [(f"{folder}/{n}", size, folder) for n, size in sorted(listing.items())
                if fnmatch.fnmatchcase(n, name)]
    if not pattern.endswith("/") and "/" in pattern.split("://", 1)[1]:  # not a bare bucket
        size = remote_size(pattern)
        if size is not None:
            return [(pattern, size, folder)]
    prefix = pattern.rstrip("/")
    listing = remote_listing(prefix)
    return [(f"{prefix}/{n}", size, prefix) for n, size in sorted(listing.items())
            if n.lower().endswith(suffixes)]


def _common_folder(folders: list[str]) -> str:
    if all(is_url(f) for f in folders):
        parts = [f.split("/") for f in folders]
        same = itertools.takewhile(lambda names: len(set(names)) == 1,
                                     zip(*parts, strict=False))
        return "/".join(names[0] for names in same)
    if any(is_url(f) for f in folders):
        return ""  # local files and URLs: each is named in full
    return os.path.commonpath(folders)


def _relative(location: str, base: str) -> str:
    if not base:
        return location
    return location[len(base):].lstrip("/") if is_url(location) else \
        os.path.relpath(location, base)
