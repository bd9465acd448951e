"""Where images come from: an ImageFolder tree, a CSV/JSONL list of `path,label[,extras]`,
WebDataset tars or Parquet files; which of them SRC is, told by what it is.

Every input is listed, in a fixed order; one already known to be unusable (a bad list line,
a dangling symlink, a tar sample without an image, ...) carries its `problem` and becomes a
reject with that reason.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from datapipe.errors import ArgumentError
from datapipe.format.remote import is_url, local_path
from preprocess.engine_base import Engine
from preprocess.file_access import InputFile
from preprocess.image_folder import scan_image_folder
from preprocess.image_inputs import ImageItem, ImageSource, SourceOptions
from preprocess.image_lists import LIST_SUFFIXES, read_image_list
from preprocess.input_files import is_datapipe_output
from preprocess.parquet_source import list_parquet_images
from preprocess.source_patterns import find_files, is_pattern
from preprocess.tar_source import list_tar_images

__all__ = ["ImageItem", "ImageSource", "SourceOptions", "list_images"]

FILE_KINDS = {".tar": "tar", ".parquet": "parquet"}  # files of many images, by suffix


def list_images(src: Path | str, leave_out: Path | None = None,
                options: SourceOptions | None = None,
                engine: Engine | None = None) -> ImageSource:
    """The inputs SRC names; `leave_out` (OUT) is never one of them. Tars are listed by the
    engine's workers (without one, here)."""
    options = options or SourceOptions()
    text = str(src) if is_url(src) else str(local_path(src))
    kind = options.kind if options.kind != "auto" else source_kind(text, leave_out)
    options.check_fields_apply(kind)
    options = options.for_kind(kind)
    if kind in ("folder", "list"):
        path = _existing(text)
        found = scan_image_folder(path, leave_out, options.caption_field) if kind == "folder" \
            else read_image_list(path, options.caption_field)
        root = os.path.abspath(path if kind == "folder" else path.parent)
        return dataclasses.replace(found, root=root, caption_field=options.caption_field)
    suffix = next(s for s, k in FILE_KINDS.items() if k == kind)
    files = find_files(text, (suffix,))
    root = _visible_root(files)
    found = list_tar_images(files, options, engine, root) if kind == "tar" else \
        list_parquet_images(files, options, root)
    return dataclasses.replace(found, caption_field=options.caption_field)


def source_kind(src: str, leave_out: Path | None = None) -> str:
    """"folder", "list", "tar" or "parquet": by the suffix SRC (or each of its patterns) ends
    in, or by what a folder holds directly."""
    if is_url(src) or (is_pattern(src) and not os.path.lexists(src)):
        return _kind_of_names(src)
    path = _existing(src)
    if path.is_dir():
        return _folder_kind(path, leave_out)
    suffix = path.suffix.lower()
    if suffix in LIST_SUFFIXES:
        return "list"
    if suffix in FILE_KINDS:
        return FILE_KINDS[suffix]
    raise ArgumentError(f"SRC {src}: expected a folder (SRC/<class>/<file>), a .csv/.jsonl "
                        "list, or .tar or .parquet files (or say which with --src-kind)")


def _existing(src: str) -> Path:
    path = Path(src)
    try:
        if not path.is_dir() and not path.exists():
            raise ArgumentError(f"SRC {src} does not exist")
    except OSError as exc:  # a name too long, a loop of links
        raise ArgumentError(f"SRC {src}: {exc.strerror or exc}") from None
    return path


def _kind_of_names(src: str) -> str:
    """A pattern or URL: by the suffix its names end in; else by the files it matches."""
    ends = {FILE_KINDS.get(Path(p.strip().rstrip("/")).suffix.lower()) for p in src.split("::")}
    if len(ends) == 1 and None not in ends:
        return ends.pop()
    return _one_kind(src, {FILE_KINDS[Path(f.location).suffix.lower()]
                           for f in find_files(src, tuple(FILE_KINDS))})


def _folder_kind(folder: Path, leave_out: Path | None) -> str:
    """A folder holding .tar (or .parquet) files and no class folders is a folder of them."""
    try:
        entries = list(os.scandir(folder))
    except OSError as exc:
        raise ArgumentError(f"SRC {folder}: cannot list folder ({exc.strerror})") from None
    kinds = {FILE_KINDS.get(Path(e.name).suffix.lower()) for e in entries if e.is_file()}
    kinds.discard(None)
    if not kinds:
        return "folder"
    classes = [e.name for e in entries if e.is_dir() and not e.name.startswith(".")
               and not _left_out(Path(e.path), leave_out)]
    kind = _one_kind(str(folder), kinds)
    if classes:
        raise ArgumentError(f"SRC {folder} holds both folders ({classes[0]}, ...) and .{kind} "
                            f"files: say which it is with --src-kind folder or --src-kind {kind}")
    return kind


def _one_kind(src: str, kinds: set[str]) -> str:
    if len(kinds) > 1:
        raise ArgumentError(f"SRC {src} holds both .tar and .parquet files: say which to read "
                            "with --src-kind, or name the files (a glob: SRC/*.tar)")
    return kinds.pop()


def _left_out(folder: Path, leave_out: Path | None) -> bool:
    if is_datapipe_output(folder):
        return True
    try:
        return leave_out is not None and os.path.samefile(folder, leave_out)
    except OSError:
        return False


def _visible_root(files: tuple[InputFile, ...]) -> str | None:
    """The folder every worker must see: the one holding the files (None: read by URL)."""
    if any(f.is_url for f in files):
        return None
    return os.path.commonpath([os.path.dirname(f.location) for f in files])
