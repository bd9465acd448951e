"""Captions beside the images of a folder, as kohya's sd-scripts and diffusers users keep them:
`cat.jpg` and `cat.txt` in the same folder. A sidecar gives its image its caption and is no
input of its own; one without an image beside it stays an input, a reject that says so."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from preprocess.captions import NotText
from preprocess.image_inputs import ImageItem

MAX_SIDECAR_BYTES = 1 << 20  # a caption file, not a document


def attach_sidecars(items: list[ImageItem], extensions: tuple[str, ...]) -> list[ImageItem]:
    """`items` with each image's caption read from its sidecar (the first of `extensions` it
    has), the sidecars that found their image left out."""
    wanted = tuple(f".{e.lower().lstrip('.')}" for e in extensions)
    sidecars = {(item.path.parent, item.path.stem, item.path.suffix.lower()): item
                for item in items if _is_sidecar(item, wanted)}
    used: set[Path] = set()
    out = []
    for item in items:
        if item.path is None or item.problem is not None or _is_sidecar(item, wanted):
            out.append(item)
            continue
        found = next((sidecars[key] for key in ((item.path.parent, item.path.stem, s)
                                                 for s in wanted) if key in sidecars), None)
        if found is None:
            out.append(item)
            continue
        used.add(found.path)
        out.append(dataclasses.replace(item, caption=read_sidecar(found.path)))
    return [_orphan(item) if _is_sidecar(item, wanted) else item
            for item in out if item.path not in used]


def _is_sidecar(item: ImageItem, suffixes: tuple[str, ...]) -> bool:
    return item.path is not None and item.problem is None and \
        item.path.suffix.lower() in suffixes


def _orphan(item: ImageItem) -> ImageItem:
    return dataclasses.replace(item, problem="a caption file with no image of the same name "
                               "beside it")


def read_sidecar(path: Path) -> str | NotText:
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_SIDECAR_BYTES + 1)
    except OSError as exc:
        return NotText(f"{path.name} is unreadable: {exc.strerror or exc}")
    if len(data) > MAX_SIDECAR_BYTES:
        return NotText(f"{path.name} is over {MAX_SIDECAR_BYTES >> 20} MB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return NotText(f"{path.name} is not UTF-8 text")
