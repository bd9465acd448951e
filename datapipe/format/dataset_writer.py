"""`dp.DatasetWriter`: a datapipe dataset written from your own samples (docs/WRITER.md).

It writes what `datapipe convert` writes, through the same destination (destination.py) and
shard writer (writer.py): the same shard formats, hashes taken as the bytes are written, shards
renamed into place whole, the manifest last. Each sample is checked against the declared
columns as it is written (sample_schema.py), so a dataset it finishes is one every reader
takes.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from datapipe import sizes
from datapipe.errors import ArgumentError, DataError
from datapipe.format.caption_writer import CAPTIONS_TYPE, CaptionEncoder
from datapipe.format.caption_writer import Mismatch as CaptionMismatch
from datapipe.format.destination import JOURNAL_NAME, WRITER_WORDING, Destination
from datapipe.format.manifest import Manifest
from datapipe.format.parts import (
    MAX_PARTS,
    RECORD_PREFIX,
    clearable_by_part,
    owned_by_another_part,
    record_bytes,
    record_name,
    shard_prefix,
)
from datapipe.format.sample_schema import Field, Mismatch, SampleSchema, parse_schema
from datapipe.format.shard_formats import FORMAT_NAMES
from datapipe.format.writer import ShardSetWriter, cell_nbytes

MAX_SHARD_SIZE = 1 << 40


@dataclass(frozen=True)
class WriterOptions:
    """How a DatasetWriter writes: shard format and target size, whether it replaces a
    dataset already there, and which part of a parallel write it is (docs/WRITER.md)."""

    shard_format: str = "arrow"
    shard_size: int | str = 256 << 20  # bytes, or a size such as "256MB"
    overwrite: bool = False
    part: int | None = None
    parts: int | None = None

    def __post_init__(self) -> None:
        if self.shard_format not in FORMAT_NAMES:
            raise ArgumentError(f"shard_format: {self.shard_format!r} is not one of "
                                f"{FORMAT_NAMES}")
        if isinstance(self.shard_size, bool) or not isinstance(self.shard_size, (int, str)):
            raise ArgumentError(f"shard_size: give bytes or a size such as '256MB', got "
                                f"{self.shard_size!r}")
        object.__setattr__(self, "shard_size", sizes.parse_size(
            self.shard_size, "shard_size", MAX_SHARD_SIZE, "1 TB"))
        if not isinstance(self.overwrite, bool):
            raise ArgumentError(f"overwrite: True or False, got {self.overwrite!r}")
        if (self.part is None) != (self.parts is None):
            raise ArgumentError("part and parts go together: part=i of parts=N")
        if self.parts is not None and not (_count(self.parts) and 1 <= self.parts <= MAX_PARTS
                                           and _count(self.part) and self.part < self.parts):
            raise ArgumentError(f"part={self.part!r}, parts={self.parts!r}: give parts=N "
                                f"(1 to {MAX_PARTS:,}) and part=i, 0 <= i < N")

    @property
    def prefix(self) -> str:
        """The names of this writer's shards."""
        return shard_prefix(self.part) if self.part is not None else "shard-"


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class DatasetWriter:
    """Writes a dataset from samples you make: `with DatasetWriter(out, columns) as writer:
    writer.write({"image": jpeg_bytes, "label": 3})`. On leaving the `with` block (or on
    `close()`) the last shard is written and then the manifest, which `close()` returns and
    `writer.manifest` holds.

    `columns` declares each column's type, up front: `jpeg`, `png` or `image` (encoded image
    bytes: the column called "image", read by dp.Loader), `pixels` (an RGB uint8 array of shape
    (height, width, 3)), `bytes`, `string`, a number (`int8` ... `uint64`, `float16`,
    `float32`, `float64`) or an array of numbers (`float32[512]`, `uint8[32,32,3]`; `uint16[]`
    is any length, and the column called "tokens" is read by dp.TokenLoader). `out` is a
    folder or a URL (`s3://bucket/prefix`, uploaded when closed, the manifest last). A folder
    already holding a dataset is refused unless `overwrite=True`. `part=i, parts=N` writes part
    i of a dataset N processes write at once; `merge_parts(out)` then joins them.

    A sample that does not match the columns (an int out of its type's range, a finite number
    its float type would store as inf, ...) is refused with a DataError naming its position
    and column, and nothing of it is written; the writer stays usable. An exception that leaves
    the `with` block (a refused sample included), or an error writing the files (a full disk),
    abandons the dataset: no manifest is written and the shards already finished are removed.
    Not thread-safe: one writer per thread.
    """

    def __init__(self, out: str | Path, columns: Mapping[str, str] | Sequence[tuple[str, str]],
                 *, shard_format: str = "arrow", shard_size: int | str = "256MB",
                 overwrite: bool = False, classes: Sequence[str] | None = None,
                 part: int | None = None, parts: int | None = None,
                 staging: str | Path | None = None, tokenizer: Any | None = None,
                 caption_max_tokens: int | None = None) -> None:
        self.options = WriterOptions(shard_format, shard_size, overwrite, part, parts)
        if classes is not None:
            classes = _class_names(classes)
        self.classes = classes
        self._captions = _caption_encoder(columns, tokenizer, caption_max_tokens)
        self.schema: SampleSchema = parse_schema(
            columns, classes, self._captions.id_type if self._captions else "uint32")
        self._fields: tuple[Field, ...] = self.schema.fields
        self._derived = tuple(value for _, value in self.schema.derived)
        self.manifest: Manifest | None = None
        self.samples_written = 0
        self._offered = 0  # refused samples included: errors number samples as the caller does
        self._closed = False
        self._destination = self._open(out, staging)
        self.where = self._destination.where
        self._shards = ShardSetWriter(self._destination.folder, self.schema.columns,
                                      self.options.shard_format, self.options.shard_size,
                                      prefix=self.options.prefix)

    def _open(self, out: str | Path, staging: str | Path | None) -> Destination:
        part, overwrite = self.options.part, self.options.overwrite
        folder = Path(staging) if staging is not None else None
        if part is None:
            destination = Destination(out, WRITER_WORDING, overwrite=overwrite, staging=folder)
        else:  # the parts share the folder; for a URL each stages its files apart
            destination = Destination(
                out, WRITER_WORDING, overwrite=overwrite,
                staging=folder / f"part-{part:05d}" if folder else None,
                staging_key=f"{out}#part{part}", shared=True,
                may_clear=functools.partial(clearable_by_part, part))
        try:
            with destination.writing():
                self._take_over(destination)
        except BaseException:
            destination.release()
            raise
        return destination

    def _take_over(self, destination: Destination) -> None:
        """Clear what an unfinished write left (shards, temporary files; a part's own record:
        the part is written again); refuse what someone may still want: finished parts
        awaiting their merge, a conversion in progress."""
        part = self.options.part
        names = [n for n in destination.leftovers()
                 if part is None or not owned_by_another_part(n, part)]
        if JOURNAL_NAME in names:
            raise ArgumentError(f"{destination.where} holds a conversion in progress; finish "
                                "it with the same datapipe convert, or pass overwrite=True")
        if part is None and any(n.startswith(RECORD_PREFIX) for n in names):
            raise ArgumentError(f"{destination.where} holds finished parts of a parallel "
                                "write; join them with merge_parts, or pass overwrite=True")
        destination.remove(names)

    # --- writing -------------------------------------------------------------------------

    def write(self, sample: Mapping[str, Any]) -> None:
        """Add one sample: a dict with a value for each declared column, and no other."""
        if self._closed:
            raise ArgumentError(f"{self.where}: the writer is closed; open another to write "
                                "more")
        self._offered += 1
        cells = self._cells(sample, self._offered - 1)
        try:
            # Copied into the shard writer's buffers at once: no sample outlives this call.
            self._shards.add_row(cells, sum(map(cell_nbytes, cells)))
        except BaseException as exc:  # a full disk, an interrupt: what is written is incomplete
            self.abandon()
            if isinstance(exc, OSError):
                with self._destination.writing():  # its one-line error
                    raise
            raise
        self.samples_written += 1
        if self._captions is not None:
            self._captions.commit()

    def write_all(self, samples: Iterable[Mapping[str, Any]]) -> int:
        """Add every sample of an iterable, in order; returns how many."""
        before = self.samples_written
        for sample in samples:
            self.write(sample)
        return self.samples_written - before

    def _cells(self, sample: Mapping[str, Any], number: int) -> list[Any]:
        """The cells of sample `number` (counting every one given to write) in the shard's
        column order; DataError if it does not fit."""
        position = f"{self.where}: sample {number}"
        if not isinstance(sample, Mapping):
            raise DataError(f"{position} is a {type(sample).__name__}, not a dict of columns")
        if len(sample) != len(self._fields) or any(f.name not in sample for f in self._fields):
            raise DataError(f"{position}: {_column_difference(sample, self.schema)}")
        cells: list[Any] = []
        for field in self._fields:
            try:
                cells.extend(self._captions.cells(sample[field.name])
                             if field.declared == CAPTIONS_TYPE else
                             field.store(sample[field.name]))
            except (Mismatch, CaptionMismatch) as exc:
                raise DataError(f"{position}, column {field.name!r}: {exc}") from None
        cells.extend(self._derived)
        return [cells[j] for j in self.schema.order]

    # --- ending --------------------------------------------------------------------------

    def close(self) -> Manifest:
        """Write the last shard, then the manifest (for a part, its record); returns the
        manifest. Closing again returns it again. If this fails, the dataset is abandoned
        as on an exception."""
        if self._closed:
            if self.manifest is None:
                raise ArgumentError(f"{self.where}: the writer was abandoned; nothing to close")
            return self.manifest
        self._closed = True
        try:
            with self._destination.writing():
                self._shards.flush()
            manifest = self._manifest()
            self._publish(manifest)
        except BaseException:
            self._abandon()
            raise
        self.manifest = manifest
        self._shards.close()
        self._destination.finish()
        return manifest

    def abandon(self) -> None:
        """Give up the dataset: no manifest, the shards written so far removed."""
        if not self._closed:
            self._closed = True
            self._abandon()

    def _abandon(self) -> None:
        self._shards.close()
        prefix, names = self.options.prefix, []
        with contextlib.suppress(OSError):
            names = [n for n in self._destination.leftovers() if n.startswith(prefix)]
        self._destination.abandon(names)

    def _manifest(self) -> Manifest:
        settings: dict[str, Any] = {"shard_size": self.options.shard_size}
        if self.schema.encoding is not None:
            settings["encoding"] = self.schema.encoding
        stats: dict[str, Any] = {"inputs": self.samples_written, "rejected": 0}
        tokenizer = None
        if self._captions is not None:
            settings["captions"] = {"max_tokens": self._captions.max_tokens}
            stats["captions"] = self._captions.stats()
            tokenizer = self._captions.identity
        return Manifest(kind=self.schema.kind, shard_format=self.options.shard_format,
                        columns=self.schema.columns, shards=tuple(self._shards.shards),
                        settings=settings, classes=self.classes, stats=stats,
                        tokenizer=tokenizer)

    def _publish(self, manifest: Manifest) -> None:
        part = self.options.part
        if part is None:
            self._destination.publish(manifest, [], resumed=False)
            return
        shards = {s.name: s.bytes for s in manifest.shards}
        self._destination.publish_side_file(
            record_name(part), record_bytes(manifest, part, self.options.parts or 0), shards)

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if kind is None:
            self.close()
        else:
            self.abandon()


def _caption_encoder(columns: Any, tokenizer: Any | None,
                     max_tokens: int | None) -> CaptionEncoder | None:
    """The encoder of a declared captions column (None: none is declared)."""
    try:
        types = list(columns.values() if isinstance(columns, Mapping) else
                     (t for _, t in columns))
    except (TypeError, ValueError):  # parse_schema names what is wrong with them
        types = []
    if CAPTIONS_TYPE not in types:
        if tokenizer is not None or max_tokens is not None:
            raise ArgumentError("tokenizer and caption_max_tokens go with a column of type "
                                "'captions'")
        return None
    return CaptionEncoder(tokenizer, max_tokens)


def _class_names(classes: Sequence[str]) -> tuple[str, ...]:
    names = tuple(classes) if not isinstance(classes, str) else ()
    if not names or not all(isinstance(n, str) for n in names):
        raise ArgumentError(f"classes: give the class names, label i being classes[i]; got "
                            f"{classes!r}")
    return names


def _column_difference(sample: Mapping[str, Any], schema: SampleSchema) -> str:
    missing = sorted(schema.names - set(sample))
    if missing:
        return f"no value for column {missing[0]!r} (columns: {', '.join(sorted(schema.names))})"
    extra = sorted(str(k) for k in set(sample) - schema.names)
    return (f"column {extra[0]!r} is not declared (columns: {', '.join(sorted(schema.names))});"
            " declare it, or leave it out of the samples")
