"""`datapipe convert images`: a folder or manifest of images -> shards of resized images."""

from __future__ import annotations

import functools
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from datapipe.format.hashing import hash_bytes
from datapipe.format.schema import Column
from preprocess.engine import ordered_map
from preprocess.image_ops import ImageSettings, RejectedImage, prepare_image
from preprocess.image_sources import ImageItem, ImageSource, list_images
from preprocess.output import ConversionResult, OutputDirectory, OutputOptions

BASE_COLUMNS = (Column("image", "bytes"), Column("label", "int64"), Column("height", "int32"),
                Column("width", "int32"), Column("path", "string"))

# A worker's answer: ("ok", payload, height, width) or ("reject", reason).
Outcome = tuple


def process_item(item: ImageItem, settings: ImageSettings) -> Outcome:
    if item.problem is not None:
        return ("reject", item.problem)
    try:
        with _open_regular_file(item.path) as file:
            payload, height, width = prepare_image(file, settings)
    except RejectedImage as exc:
        return ("reject", str(exc))
    except OSError as exc:
        return ("reject", f"unreadable: {exc.strerror or exc}")
    return ("ok", payload, height, width)


def _open_regular_file(path: Path) -> BinaryIO:
    """Open for reading, refusing FIFOs and devices (reading one could block forever)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without a writer
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RejectedImage("not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def convert_images(src: Path, options: OutputOptions, settings: ImageSettings, workers: int,
                   progress: Callable[[int, int], None] | None = None) -> ConversionResult:
    """Convert every image under SRC; `progress(done, total)` is called as inputs finish."""
    source = list_images(src)
    columns = BASE_COLUMNS + tuple(Column(n, t) for n, t in source.extra_columns)
    settings_record = {**settings.record(), "shard_size": options.shard_size}
    fingerprint = hash_bytes(json.dumps({
        "kind": "images", "format": options.shard_format, "settings": settings_record,
        "inputs": [(i.source, i.label, list(i.extras)) for i in source.items]},
        default=str).encode())
    with OutputDirectory(options, "images", columns, fingerprint) as output:
        todo = source.items[output.resume_from:]
        work = functools.partial(process_item, settings=settings)
        outcomes = ordered_map(work, todo, workers, chunksize=16)
        _write_outcomes(output, source, outcomes, progress)
        return output.finish(len(source.items), settings_record, stats={},
                             classes=source.classes)


def _write_outcomes(output: OutputDirectory, source: ImageSource, outcomes: Iterator[Outcome],
                    progress: Callable[[int, int], None] | None) -> None:
    """Samples and rejects into OUT, in input order (the resumed part already is)."""
    extra_names = [name for name, _ in source.extra_columns]
    for index, outcome in enumerate(outcomes, output.resume_from):
        item = source.items[index]
        if outcome[0] == "ok":
            _, payload, height, width = outcome
            sample = {"image": payload, "label": item.label, "height": height, "width": width,
                      "path": item.source}
            sample.update(zip(extra_names, item.extras, strict=True))
            output.add(index, sample)
        else:
            output.reject(index, item.source, outcome[1])
        if progress is not None:
            progress(index + 1, len(source.items))
