"""One conversion's output directory: prepare or resume it, journal shards, finish it.

Everything a converter writes goes through here, so every converter gets the same guarantees:
resume after a kill or a full disk, rejects listed in OUT/rejects.jsonl; and through the
destination and shard writer below it, which DatasetWriter uses too: one writer at a time,
atomic hashed shards, manifest written last, an OUT that is a URL written in a local staging
folder and uploaded at the end (datapipe/format/destination.py).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datapipe import sizes
from datapipe.errors import ArgumentError, DataError
from datapipe.format.destination import CONVERT_WORDING, REJECTS_NAME, Destination
from datapipe.format.manifest import Manifest, write_atomic
from datapipe.format.schema import Column
from datapipe.format.shard_formats import FORMAT_NAMES
from datapipe.format.writer import ShardSetWriter, rows_nbytes
from preprocess.reject_limit import RejectLimit, reject_share
from preprocess.resume import JOURNAL_NAME, Journal

MAX_SHARD_SIZE = 1 << 40


def parse_size(text: str) -> int:
    """'256MB', '1.5G', '4096' -> bytes (powers of 1024)."""
    return sizes.parse_size(text, "--shard-size", MAX_SHARD_SIZE, "1 TB")


@dataclass(frozen=True)
class OutputOptions:
    out: Path | str  # a folder, or a URL such as s3://bucket/prefix
    shard_format: str = "arrow"
    shard_size: int = 256 << 20
    overwrite: bool = False
    strict: bool = False
    staging: Path | None = None  # for a URL: where shards are made before upload
    max_rejects: RejectLimit | None = None  # None: any number, as long as one input converts

    def __post_init__(self) -> None:
        if self.max_rejects is not None and not isinstance(self.max_rejects, RejectLimit):
            raise ArgumentError(f"--max-rejects: expected a RejectLimit, got "
                                f"{self.max_rejects!r}")
        if self.shard_format not in FORMAT_NAMES:
            raise ArgumentError(f"--format: {self.shard_format!r} is not one of {FORMAT_NAMES}")
        if self.shard_size < 1:
            raise ArgumentError(f"--shard-size: must be positive, got {self.shard_size}")


@dataclass
class ConversionResult:
    manifest: Manifest
    out: Path | str
    inputs: int
    rejects: list[dict[str, Any]]
    seconds: float
    resumed_shards: int
    extra: dict[str, Any] = field(default_factory=dict)


class OutputDirectory:
    """Owns OUT for one run of a converter: use it as a context manager, so that the lock on
    OUT is given back however the run ends. OUT is a Destination (the folder or URL every
    dataset writer goes through) written by a ShardSetWriter; the journal and the rejects
    are the converters' own, above them."""

    def __init__(self, options: OutputOptions, kind: str, columns: tuple[Column, ...],
                 fingerprint: str) -> None:
        self.destination = Destination(options.out, CONVERT_WORDING,
                                       overwrite=options.overwrite, staging=options.staging)
        self.options = options
        self.out = self.destination.folder  # the staging folder, for a URL
        self.kind = kind
        self.columns = columns
        self.started = time.perf_counter()
        try:
            with self.destination.writing():
                self._start(fingerprint)
        except BaseException:
            self.destination.release()
            raise

    def __enter__(self) -> OutputDirectory:
        return self

    def __exit__(self, *_: object) -> None:
        writer = getattr(self, "writer", None)
        if writer is not None:
            writer.close()
        self.destination.release()

    def _start(self, fingerprint: str) -> None:
        """Take over OUT: a fresh start, or the intact part of an interrupted run."""
        if self.destination.leftovers() and not (self.out / JOURNAL_NAME).exists():
            raise ArgumentError(f"OUT {self.out} is not empty; pass --overwrite to replace its "
                                "contents")
        self.journal = Journal(self.out, fingerprint)
        previous = self.journal.load() if self.journal.exists() else None
        kept = previous.shards if previous else []
        self.rejects: list[dict[str, Any]] = previous.rejects if previous else []
        self.resume_from = previous.inputs_done if previous else 0
        # A converter that reads its inputs in spans says where a span near `inputs_done`
        # starts (resume_point_at); a rerun gets it back as resume_point.
        self.resume_point = previous.resume_point if previous else None
        self.resume_point_at: Callable[[int], dict[str, Any] | None] | None = None
        self.resumed_shards = len(kept)
        self._clear_unjournaled(keep={s.name for s in kept})
        if previous:
            self.journal.rewrite(previous)
        else:
            self.journal.start()
        # Rejects not yet journalled; the shard writer's thread takes them as shards close.
        self._pending_rejects: list[dict[str, Any]] = []
        self._rejects_lock = threading.Lock()
        self.writer = ShardSetWriter(self.out, self.columns, self.options.shard_format,
                                     self.options.shard_size, first_index=len(kept),
                                     on_shard=self._on_shard)
        self.writer.shards.extend(kept)

    def _clear_unjournaled(self, keep: set[str]) -> None:
        for path in self.out.iterdir():
            if path.name.startswith("shard-") and path.name not in keep:
                path.unlink()

    def _on_shard(self, shard: Any, inputs_done: int) -> None:
        """Journal a written shard: the inputs before `inputs_done` are all in OUT."""
        with self._rejects_lock:
            done = [r for r in self._pending_rejects if r["input"] < inputs_done]
            self._pending_rejects = [r for r in self._pending_rejects
                                     if r["input"] >= inputs_done]
        point = self.resume_point_at(inputs_done) if self.resume_point_at else None
        self.journal.record(shard, inputs_done, done, point)
        self.rejects.extend(done)

    def add(self, input_index: int, sample: dict[str, Any]) -> None:
        """Add the sample made from input `input_index` (inputs arrive in order)."""
        with self.destination.writing():
            self.writer.add(sample, tag=input_index)

    def add_rows(self, inputs: Sequence[int], rows: dict[str, Sequence[Any]],
                 sizes: Sequence[int] | None = None) -> None:
        """Add the samples made from `inputs` (in order), given column by column; `sizes`
        (their `rows_nbytes`, where a worker already knows them) spares this process the sums."""
        if sizes is None:
            sizes = rows_nbytes(self.columns, rows)
        with self.destination.writing():
            self.writer.add_rows(rows, sizes, tags=inputs)

    def reject(self, input_index: int, source: str, reason: str) -> None:
        """List input `input_index` as a reject (before adding any later input's sample)."""
        if self.options.strict:
            raise DataError(f"{source}: {reason} (--strict stops at the first bad input)")
        with self._rejects_lock:
            self._pending_rejects.append({"input": input_index, "source": source,
                                          "reason": reason})

    def finish(self, inputs: int, settings: dict[str, Any], stats: dict[str, Any],
               tokenizer: dict[str, Any] | None = None,
               classes: tuple[str, ...] | None = None) -> ConversionResult:
        """Flush the last shard, write rejects, check the run did its work (or fail it, see
        _check_work_done), and last of all the manifest (for a URL: upload them, and the
        manifest last). Until the manifest is published, the journal stays: a rerun after a
        kill resumes it."""
        with self.destination.writing():
            self.writer.flush(tag=inputs)
            self.rejects.extend(self._pending_rejects)
            self._pending_rejects = []
            rejects_text = "".join(json.dumps(r) + "\n" for r in self.rejects)
            write_atomic(self.out / REJECTS_NAME, rejects_text.encode())
        self._check_work_done(inputs)
        manifest = Manifest(
            kind=self.kind, shard_format=self.options.shard_format, columns=self.columns,
            shards=tuple(self.writer.shards), settings=settings, tokenizer=tokenizer,
            classes=classes, stats={**stats, "inputs": inputs, "rejected": len(self.rejects)})
        self.destination.publish(manifest, [REJECTS_NAME], resumed=True)
        with self.destination.writing():
            self.journal.remove()
        self.destination.finish()
        target = self.destination.target
        return ConversionResult(manifest=manifest, out=target.url if target else self.out,
                                inputs=inputs, rejects=self.rejects,
                                seconds=time.perf_counter() - self.started,
                                resumed_shards=self.resumed_shards)

    def _check_work_done(self, inputs: int) -> None:
        """Fail a run that converted nothing, or rejected more than --max-rejects allows. What
        it wrote stays as a conversion in progress, not a dataset (no manifest, nothing
        uploaded): the same command with a higher limit then finishes it from the journal."""
        converted = sum(shard.rows for shard in self.writer.shards)
        rejected, listed = len(self.rejects), self.out / REJECTS_NAME
        if not converted:
            raise DataError(f"0 of {inputs:,} inputs converted, see {listed}" if inputs else
                            "0 inputs: the sources hold nothing to convert")
        limit = self.options.max_rejects
        if limit is not None and limit.exceeded(rejected, inputs):
            raise DataError(
                f"{rejected:,} of {inputs:,} inputs rejected ({reject_share(rejected, inputs)}), "
                f"more than --max-rejects {limit} allows; see {listed}. The {converted:,} samples "
                "made are kept: the same command with a higher limit finishes the dataset")
