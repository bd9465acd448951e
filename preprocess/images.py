"""`datapipe convert images`: a folder, a list, tars or Parquet files of images -> shards of
resized images."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import socket
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from datapipe.errors import DataError
from datapipe.format.captions import CAPTION_LENGTHS
from datapipe.format.hashing import hash_bytes
from datapipe.format.schema import Column
from datapipe.format.writer import rows_nbytes
from preprocess.caption_counts import CaptionCounts
from preprocess.captions import CaptionOptions, CaptionWork, NotText
from preprocess.engine import Engine, LocalEngine
from preprocess.file_access import InputFile
from preprocess.image_inputs import ImageItem, ImageSource, ParquetRow, SourceOptions
from preprocess.image_ops import ImageSettings, RejectedImage, prepare_image
from preprocess.image_sources import list_images
from preprocess.input_bytes import InputData, Unreadable, span_inputs
from preprocess.output import ConversionResult, OutputDirectory, OutputOptions

BASE_COLUMNS = (Column("image", "bytes"), Column("label", "int64"), Column("height", "int32"),
                Column("width", "int32"), Column("path", "string"))

MAX_PARQUET_TASK = 256  # rows: a task's results stay a few MiB of encoded images

# A worker's answer: ("ok", payload, height, width) or ("reject", reason).
Outcome = tuple


def process_item(item: ImageItem, settings: ImageSettings, data: InputData = None) -> Outcome:
    """Convert one input: from `data` when its bytes were read from a tar or Parquet file, else
    from its own file."""
    if item.problem is not None:
        return ("reject", item.problem)
    if isinstance(data, Unreadable):
        return ("reject", data.reason)
    try:
        if data is not None:
            payload, height, width = prepare_image(data, settings)
        else:
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
    # SRC's folder, None when SRC is read by URL: a worker that cannot see it is on a node
    # without SRC
    visible_root: str | None
    columns: tuple[Column, ...] = BASE_COLUMNS
    extra_columns: tuple[str, ...] = ()
    files: tuple[InputFile, ...] = ()  # the tars or Parquet files items lie in
    image_columns: tuple[str, ...] = ()  # of each Parquet file
    captions: CaptionWork | None = None


@dataclass
class ImageRows:
    """A span's samples, column by column as the shard writer takes them, and its rejects:
    the writing process only hands them on."""

    kept: list[int]  # positions in the span
    rows: dict[str, list[Any]]
    sizes: list[int]  # each sample's rows_nbytes
    rejects: list[tuple[int, str]]  # (position, reason)
    truncated: int = 0  # captions cut to --caption-max-tokens


def convert_span(work: ImageWork, span: tuple[int, int]) -> ImageRows:
    """The samples and rejects of inputs span[0]..span[1]-1: one engine task."""
    if work.visible_root is not None:
        _check_visible(work.visible_root)
    result = ImageRows([], {c.name: [] for c in work.columns}, [], [])
    rows = result.rows
    items = work.items[span[0]:span[1]]
    inputs = span_inputs(work.files, work.image_columns, items)
    captions: list[list[str]] = []
    for position, (item, data) in enumerate(zip(items, inputs, strict=True)):
        texts = work.captions.texts(item.caption) if work.captions else []
        outcome = ("reject", texts) if isinstance(texts, str) else \
            process_item(item, work.settings, data)
        if outcome[0] != "ok":
            result.rejects.append((position, outcome[1]))
            continue
        result.kept.append(position)
        captions.append(texts)
        for name, value in zip(("image", "height", "width", "label", "path"),
                               (*outcome[1:], item.label, item.source), strict=True):
            rows[name].append(value)
        for name, value in zip(work.extra_columns, item.extras, strict=True):
            rows[name].append(value)
    if work.captions is not None:
        result.truncated = _add_captions(work.captions, captions, rows)
    result.sizes = rows_nbytes(work.columns, rows)
    return result


def _add_captions(work: CaptionWork, captions: list[list[str]],
                  rows: dict[str, list[Any]]) -> int:
    """The kept samples' caption cells into `rows`; returns how many captions were cut."""
    cells, truncated = work.cells(captions)
    for column, values in zip(work.columns, zip(*cells, strict=True) if cells else
                              [()] * len(work.columns), strict=True):
        rows[column.name].extend(values)
    return truncated


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


def _spans(source: ImageSource, start: int, engine: Engine) -> Iterator[tuple[int, int]]:
    """Tasks of inputs from `start`. Parquet rows go in larger tasks, cut where a row group
    ends: a worker reads a row group's pages in one pass, and a task's part of one is read by
    decoding the group up to it."""
    total, size = len(source.items), _span_size(len(source.items), engine)
    if source.image_columns:
        size = min(MAX_PARQUET_TASK, max(size, total // (engine.workers * 8)))
    at = start
    while at < total:
        stop, group = min(at + size, total), _row_group(source.items[at])
        if group is not None:
            stop = next((i for i in range(at + 1, stop)
                         if _row_group(source.items[i]) != group), stop)
        yield at, stop
        at = stop


def _row_group(item: ImageItem) -> tuple[int, int] | None:
    member = item.member
    return (member.file, member.group) if isinstance(member, ParquetRow) else None


def convert_images(src: Path | str, options: OutputOptions, settings: ImageSettings,
                   workers: int, progress: Callable[[int, int], None] | None = None,
                   engine: Engine | None = None,
                   sources: SourceOptions | None = None,
                   captions: CaptionOptions | None = None) -> ConversionResult:
    """Convert every image SRC holds; `progress(done, total)` is called as inputs finish.

    `engine` runs the work (default: `workers` local processes), tars' listing included; the
    output is the same. `sources` says how SRC is read (default: told by what it is);
    `captions`, whether and how each image's captions are tokenized and stored beside it."""
    engine = engine or LocalEngine(workers)
    caption_work = CaptionWork.load(captions) if captions is not None else None
    if captions is not None:
        sources = dataclasses.replace(sources or SourceOptions(), captions=True,
                                      caption_field=captions.field)
    source = list_images(src, options.out if isinstance(options.out, Path) else None, sources,
                         engine)
    columns = BASE_COLUMNS + tuple(Column(n, t) for n, t in source.extra_columns)
    settings_record = {**settings.record(), "shard_size": options.shard_size}
    tokenizer = None
    if caption_work is not None:
        caption_work = caption_work.reading(source.caption_field)
        columns += caption_work.columns
        settings_record["captions"] = {**caption_work.options.record(),
                                       "field": source.caption_field}
        tokenizer = caption_work.manifest_tokenizer()
    work = ImageWork(source.items, settings, source.root, columns,
                     tuple(name for name, _ in source.extra_columns), source.files,
                     source.image_columns, caption_work)
    with OutputDirectory(options, "images", columns,
                         _fingerprint(source, options, settings_record, tokenizer)) as output:
        spans = _spans(source, output.resume_from, engine)
        counts = CaptionCounts.of_kept_shards(output) if caption_work else None
        _write_spans(output, source, engine.map_ordered(convert_span, work, spans), progress,
                     counts)
        stats = {"captions": counts.stats()} if counts else {}
        return output.finish(len(source.items), settings_record, stats=stats,
                             classes=source.classes, tokenizer=tokenizer)


def _fingerprint(source: ImageSource, options: OutputOptions,
                 settings_record: dict[str, Any], tokenizer: dict[str, Any] | None) -> str:
    """What a resumed run must share with the run it resumes: inputs, settings, format."""
    record: dict[str, Any] = {
        "kind": "images", "format": options.shard_format, "settings": settings_record,
        "inputs": [(i.source, i.label, list(i.extras)) for i in source.items]}
    if tokenizer is not None:  # and each input's captions
        record["tokenizer"] = tokenizer
        record["captions"] = [_caption_key(i.caption) for i in source.items]
    if source.files:  # where each image lies in them, and their sizes
        # A member's fields are ints: its values as astuple gives them, without the deep copy
        # (a sixth of a second for 10,000 images, before the first is converted).
        record["members"] = [tuple(vars(i.member).values()) if i.member else None
                             for i in source.items]
        record["files"] = [(f.name, f.size) for f in source.files]
    return hash_bytes(json.dumps(record, default=str).encode())


def _caption_key(caption: Any) -> Any:
    return caption if not isinstance(caption, NotText) else f"not text: {caption.why}"


def _write_spans(output: OutputDirectory, source: ImageSource, spans: Iterator[ImageRows],
                 progress: Callable[[int, int], None] | None,
                 counts: CaptionCounts | None = None) -> None:
    """Samples and rejects into OUT, in input order (the resumed part already is)."""
    index = output.resume_from
    for span in spans:
        for position, reason in span.rejects:
            output.reject(index + position, source.items[index + position].source, reason)
        output.add_rows([index + p for p in span.kept], span.rows, span.sizes)
        if counts is not None:
            counts.add(span.rows[CAPTION_LENGTHS], span.truncated)
        index += len(span.kept) + len(span.rejects)
        if progress is not None:
            progress(index, len(source.items))
