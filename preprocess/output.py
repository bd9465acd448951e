"""One conversion's output directory: prepare or resume it, journal shards, finish it.

Everything a converter writes goes through here, so every converter gets the same guarantees:
one writer at a time, atomic shards, resume after a kill or a full disk, rejects listed in
OUT/rejects.jsonl, manifest written last. An OUT that is a URL is written in a local staging
folder and uploaded at the end (see upload.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datapipe import sizes
from datapipe.errors import ArgumentError, DataError, DatapipeError
from datapipe.format.manifest import MANIFEST_NAME, Manifest, write_atomic
from datapipe.format.remote import is_url
from datapipe.format.schema import Column
from datapipe.format.shard_formats import FORMAT_NAMES
from datapipe.format.writer import ShardSetWriter, rows_nbytes
from preprocess.output_lock import LOCK_NAME, OutputLock
from preprocess.reject_limit import RejectLimit, reject_share
from preprocess.resume import JOURNAL_NAME, Journal
from preprocess.upload import RemoteTarget, staging_directory

REJECTS_NAME = "rejects.jsonl"
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


def _is_ours(name: str) -> bool:
    # Temporary names too (NAME.tmp): a run stopped mid-write leaves them for the next to clear.
    return name.startswith(("shard-", ".datapipe-", MANIFEST_NAME, REJECTS_NAME))


def _make_directory(out: Path) -> None:
    with _writing(out):
        if out.exists() and not out.is_dir():
            raise ArgumentError(f"OUT {out} exists and is not a directory")
        out.mkdir(parents=True, exist_ok=True)


def _prepare_directory(out: Path, overwrite: bool) -> None:
    """Check OUT (held locked) may be written, and empty it for --overwrite."""
    names = [p.name for p in out.iterdir() if p.name != LOCK_NAME]
    foreign = sorted(n for n in names if not _is_ours(n))
    if foreign:
        raise ArgumentError(f"OUT {out} holds files datapipe did not write ({foreign[0]}, ...); "
                            "choose an empty or new directory")
    if overwrite:
        for name in names:
            path = out / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    elif MANIFEST_NAME in names:
        raise ArgumentError(f"OUT {out} already holds a finished dataset; pass --overwrite "
                            "to replace it")
    elif names and JOURNAL_NAME not in names:
        raise ArgumentError(f"OUT {out} is not empty; pass --overwrite to replace its contents")


@contextlib.contextmanager
def _writing(out: Path) -> Iterator[None]:
    """OS errors while writing OUT become one-line errors: the user can act on every one."""
    try:
        yield
    except OSError as exc:
        name = f" ({Path(exc.filename).name})" if exc.filename else ""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DatapipeError(
                f"OUT {out}: no space left on the device{name}; free some and rerun the same "
                "command: it resumes from the last finished shard") from None
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise ArgumentError(f"OUT {out} is not writable{name}: {exc.strerror}") from None
        if exc.errno in (errno.ENOTDIR, errno.ENAMETOOLONG):  # OUT names no possible folder
            raise ArgumentError(f"OUT {out}: {exc.strerror}") from None
        raise DatapipeError(f"OUT {out}: cannot write{name}: {exc.strerror or exc}") from None


class OutputDirectory:
    """Owns OUT for one run of a converter: use it as a context manager, so that the lock on
    OUT is given back however the run ends."""

    def __init__(self, options: OutputOptions, kind: str, columns: tuple[Column, ...],
                 fingerprint: str) -> None:
        self.target: RemoteTarget | None = None
        if is_url(options.out):
            self.target = RemoteTarget(str(options.out), _is_ours)
            options = dataclasses.replace(
                options, out=staging_directory(self.target.url, options.staging))
        self.options = options
        self.kind = kind
        self.columns = columns
        self.started = time.perf_counter()
        _make_directory(options.out)
        self.lock = OutputLock(options.out)
        try:
            with _writing(options.out):
                self.lock.acquire()
                self._start(fingerprint)
        except BaseException:
            self.lock.release()
            raise

    def __enter__(self) -> OutputDirectory:
        return self

    def __exit__(self, *_: object) -> None:
        writer = getattr(self, "writer", None)
        if writer is not None:
            writer.close()
        self.lock.release()

    def _start(self, fingerprint: str) -> None:
        """Take over OUT: a fresh start, or the intact part of an interrupted run."""
        options = self.options
        if self.target is not None:
            self.target.prepare(options.overwrite)
        _prepare_directory(options.out, options.overwrite)
        self.journal = Journal(options.out, fingerprint)
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
        self.writer = ShardSetWriter(options.out, self.columns, options.shard_format,
                                     options.shard_size, first_index=len(kept),
                                     on_shard=self._on_shard)
        self.writer.shards.extend(kept)

    def _clear_unjournaled(self, keep: set[str]) -> None:
        for path in self.options.out.iterdir():
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
        with _writing(self.options.out):
            self.writer.add(sample, tag=input_index)

    def add_rows(self, inputs: Sequence[int], rows: dict[str, Sequence[Any]],
                 sizes: Sequence[int] | None = None) -> None:
        """Add the samples made from `inputs` (in order), given column by column; `sizes`
        (their `rows_nbytes`, where a worker already knows them) spares this process the sums."""
        if sizes is None:
            sizes = rows_nbytes(self.columns, rows)
        with _writing(self.options.out):
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
        manifest last)."""
        out = self.options.out
        with _writing(out):
            self.writer.flush(tag=inputs)
            self.rejects.extend(self._pending_rejects)
            self._pending_rejects = []
            rejects_text = "".join(json.dumps(r) + "\n" for r in self.rejects)
            write_atomic(out / REJECTS_NAME, rejects_text.encode())
        self._check_work_done(inputs)
        with _writing(out):
            manifest = Manifest(
                kind=self.kind, shard_format=self.options.shard_format, columns=self.columns,
                shards=tuple(self.writer.shards), settings=settings, tokenizer=tokenizer,
                classes=classes, stats={**stats, "inputs": inputs, "rejected": len(self.rejects)})
            if self.target is None:
                manifest.save(out)
                self.journal.remove()
        if self.target is not None:
            self._publish(manifest)
        self.lock.release()
        with contextlib.suppress(OSError):
            if self.target is not None:
                out.rmdir()  # the staging folder, emptied by _publish
        return ConversionResult(manifest=manifest, out=self.target.url if self.target else out,
                                inputs=inputs, rejects=self.rejects,
                                seconds=time.perf_counter() - self.started,
                                resumed_shards=self.resumed_shards)

    def _check_work_done(self, inputs: int) -> None:
        """Fail a run that converted nothing, or rejected more than --max-rejects allows. What
        it wrote stays as a conversion in progress, not a dataset (no manifest, nothing
        uploaded): the same command with a higher limit then finishes it from the journal."""
        converted = sum(shard.rows for shard in self.writer.shards)
        rejected, listed = len(self.rejects), self.options.out / REJECTS_NAME
        if not converted:
            raise DataError(f"0 of {inputs:,} inputs converted, see {listed}" if inputs else
                            "0 inputs: the sources hold nothing to convert")
        limit = self.options.max_rejects
        if limit is not None and limit.exceeded(rejected, inputs):
            raise DataError(
                f"{rejected:,} of {inputs:,} inputs rejected ({reject_share(rejected, inputs)}), "
                f"more than --max-rejects {limit} allows; see {listed}. The {converted:,} samples "
                "made are kept: the same command with a higher limit finishes the dataset")

    def _publish(self, manifest: Manifest) -> None:
        """Upload the staged dataset, then empty the staging folder (all but the lock). Until
        the upload is done, the journal stays: a rerun after a kill resumes it."""
        out = self.options.out
        self.target.upload(out, manifest, [REJECTS_NAME])
        with _writing(out):
            self.journal.remove()
            for path in out.iterdir():
                if path.name != LOCK_NAME:
                    path.unlink()
