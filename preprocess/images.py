"""`datapipe convert images`: a folder or manifest of images -> shards of resized images."""

from __future__ import annotations

import functools
import json
import os
import socket
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from datapipe.errors import DataError
from datapipe.format.hashing import hash_bytes
from datapipe.format.schema import Column
from preprocess.engine import Engine, LocalEngine
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


@dataclass(frozen=True)
class ImageWork:
    """What every worker holds for the whole run: the inputs and the settings."""

    items: tuple[ImageItem, ...]
    settings: ImageSettings
    visible_root: str  # SRC's folder: a worker that cannot see it is on a node without SRC


def convert_span(work: ImageWork, span: tuple[int, int]) -> list[Outcome]:
    """The outcomes of inputs span[0]..span[1]-1: one engine task."""
    _check_visible(work.visible_root)
    return [process_item(item, work.settings) for item in work.items[span[0]:span[1]]]


@functools.cache
def _check_visible(root: str) -> None:
    """Once per worker process: a cluster node that does not mount SRC would otherwise turn
    every input into an 'unreadable' reject."""
    if not os.path.exists(root):
        raise DataError(f"SRC {root} is not visible on {socket.gethostname()}: converting on a "
                        "cluster needs SRC at the same path on every node (a shared filesystem)")


def _span_size(total: int, engine: Engine) -> int:
    """Inputs per task: several tasks per worker, so the last ones end close together."""
    return max(1, min(engine.max_task_inputs, total // (engine.workers * 8)))


def convert_images(src: Path, options: OutputOptions, settings: ImageSettings, workers: int,
                   progress: Callable[[int, int], None] | None = None,
                   engine: Engine | None = None) -> ConversionResult:
    """Convert every image under SRC; `progress(done, total)` is called as inputs finish.

    `engine` runs the work (default: `workers` local processes); the output is the same."""
    source = list_images(src)
    engine = engine or LocalEngine(workers)
    columns = BASE_COLUMNS + tuple(Column(n, t) for n, t in source.extra_columns)
    settings_record = {**settings.record(), "shard_size": options.shard_size}
    fingerprint = hash_bytes(json.dumps({
        "kind": "images", "format": options.shard_format, "settings": settings_record,
        "inputs": [(i.source, i.label, list(i.extras)) for i in source.items]},
        default=str).encode())
    root = src if src.is_dir() else src.parent
    work = ImageWork(source.items, settings, os.path.abspath(root))
    with OutputDirectory(options, "images", columns, fingerprint) as output:
        total, size = len(source.items), _span_size(len(source.items), engine)
        spans = ((i, min(i + size, total)) for i in range(output.resume_from, total, size))
        outcomes = engine.map_ordered(convert_span, work, spans)
        _write_outcomes(output, source, outcomes, progress)
        return output.finish(total, settings_record, stats={}, classes=source.classes)


def _write_outcomes(output: OutputDirectory, source: ImageSource,
                    spans: Iterator[list[Outcome]],
                    progress: Callable[[int, int], None] | None) -> None:
    """Samples and rejects into OUT, in input order (the resumed part already is)."""
    index = output.resume_from
    for outcomes in spans:
        inputs = []
        images, heights, widths = [], [], []
        for number, outcome in enumerate(outcomes, index):
            if outcome[0] == "ok":
                inputs.append(number)
                images.append(outcome[1])
                heights.append(outcome[2])
                widths.append(outcome[3])
            else:
                output.reject(number, source.items[number].source, outcome[1])
        items = [source.items[i] for i in inputs]
        rows = {"image": images, "label": [item.label for item in items], "height": heights,
                "width": widths, "path": [item.source for item in items]}
        for k, (name, _) in enumerate(source.extra_columns):
            rows[name] = [item.extras[k] for item in items]
        output.add_rows(inputs, rows)
        index += len(outcomes)
        if progress is not None:
            progress(index, len(source.items))
