"""Where images come from: an ImageFolder tree or a CSV/JSONL list of `path,label[,extras]`.

Every input is listed, in a fixed order; one already known to be unusable (a bad list line,
a dangling symlink, ...) carries its `problem` and becomes a reject with that reason.
"""

from __future__ import annotations

from pathlib import Path

from datapipe.errors import ArgumentError
from preprocess.image_folder import scan_image_folder
from preprocess.image_inputs import ImageItem, ImageSource
from preprocess.image_lists import LIST_SUFFIXES, read_image_list

__all__ = ["ImageItem", "ImageSource", "list_images"]


def list_images(src: Path, leave_out: Path | None = None) -> ImageSource:
    """The inputs SRC names; `leave_out` (OUT) is never one of them."""
    try:
        is_dir = src.is_dir()
        if not is_dir and not src.exists():
            raise ArgumentError(f"SRC {src} does not exist")
    except OSError as exc:  # a name too long, a loop of links
        raise ArgumentError(f"SRC {src}: {exc.strerror or exc}") from None
    if is_dir:
        return scan_image_folder(src, leave_out)
    if src.suffix.lower() not in LIST_SUFFIXES:
        raise ArgumentError(f"SRC {src}: expected a directory (SRC/<class>/<file>) or a "
                            ".csv/.jsonl manifest")
    return read_image_list(src)
