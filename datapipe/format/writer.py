"""Rolls samples into shards of a target size, written as they fill; each appears atomically."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from datapipe.format.chunk_columns import ChunkColumns
from datapipe.format.manifest import ShardInfo
from datapipe.format.schema import Column
from datapipe.format.shard_file import ShardFile
from datapipe.format.shard_formats import get_format

SCALAR_NBYTES = 8
# Rows go to the shard file in chunks of about this size (an Arrow record batch each): the
# shard is written while it fills, not all at once when it is cut, so the last shard's writing
# is not a serial tail after the workers are done. Cut by sample sizes alone, so the bytes do
# not depend on how rows arrive (one by one, or in batches of any size).
CHUNK_BYTES = 32 << 20


def shard_name(index: int, shard_format: str, prefix: str = "shard-") -> str:
    return f"{prefix}{index:05d}{get_format(shard_format).suffix}"


def sample_nbytes(columns: tuple[Column, ...], sample: dict[str, Any]) -> int:
    """Approximate stored size of one sample, used to cut shards near the target size."""
    return sum(cell_nbytes(sample[col.name]) for col in columns)


def rows_nbytes(columns: tuple[Column, ...], rows: dict[str, Sequence[Any]]) -> list[int]:
    """`sample_nbytes` of each of the rows given column by column."""
    per_column = [[cell_nbytes(v) for v in rows[col.name]] for col in columns]
    return [sum(sizes) for sizes in zip(*per_column, strict=True)]


def cell_nbytes(value: Any) -> int:
    """What one cell adds to its shard, about."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        return len(value)
    return SCALAR_NBYTES


class ShardSetWriter:
    """Buffers samples and cuts a shard whenever the next sample would pass `target_bytes`.

    Samples are never split across shards. Each is copied into the buffers of the chunk being
    filled as it is added (chunk_columns.py), so the caller's objects are not kept. Within a
    shard, every `CHUNK_BYTES` of samples are handed to a background thread that appends them
    to the shard's file while the next chunk fills; the process feeding samples waits on the
    disk only when a chunk is ready before the previous one is written (one at a time, which
    bounds memory). A shard is written under a temporary name; when it is cut, a second thread
    fsyncs and renames it while the next one is written (one waits on the disk at a time),
    then calls `on_shard(info, tag)`, in shard order, with the tag of the sample that opens
    the next shard: a reader never sees a partial shard. Shards are named `prefix` and their
    index (shard-00000.arrow, ...).
    """

    def __init__(self, directory: str | Path, columns: tuple[Column, ...], shard_format: str,
                 target_bytes: int, first_index: int = 0,
                 on_shard: Callable[[ShardInfo, Any], None] | None = None,
                 chunk_bytes: int | None = None, prefix: str = "shard-") -> None:
        self.directory = Path(directory)
        self.columns = columns
        self.shard_format = shard_format
        self.target_bytes = target_bytes
        self.chunk_bytes = chunk_bytes or CHUNK_BYTES
        self.next_index = first_index
        self.on_shard = on_shard
        self.prefix = prefix
        self.shards: list[ShardInfo] = []
        # Two chunks' buffers, used in turn: one filling while the other is being written.
        # A chunk ends with the sample that takes it to chunk_bytes: room for a quarter more
        # (a larger last sample grows the buffers, once).
        reserve = self.chunk_bytes + (self.chunk_bytes >> 2)
        self._chunk, self._spare = ChunkColumns(columns, reserve), ChunkColumns(columns, reserve)
        self._chunk_bytes = 0
        self._rows = 0  # in the shard being filled, handed over or not
        self._bytes = 0
        self._background: ThreadPoolExecutor | None = None
        self._writing: Future[None] | None = None
        self._open: ShardFile | None = None  # the background thread's
        self._finisher: ThreadPoolExecutor | None = None
        self._finishing: Future[None] | None = None  # the last shard cut, being published

    @property
    def buffered_rows(self) -> int:
        return self._rows

    def add(self, sample: dict[str, Any], tag: Any = None) -> None:
        self.add_row([sample[c.name] for c in self.columns],
                     sample_nbytes(self.columns, sample), tag)

    def add_row(self, cells: Sequence[Any], size: int, tag: Any = None) -> None:
        """One sample, its cells in column order and `size` its `sample_nbytes`: what
        `add_rows` does with one row, without its search, for a writer fed sample by sample
        (the sample is copied in while the caller's bytes are still in the CPU's cache)."""
        if self._rows and self._bytes + size > self.target_bytes:
            self.cut(tag)
        self._chunk.append_row(cells)
        self._rows += 1
        self._bytes += size
        self._chunk_bytes += size
        if self._chunk_bytes >= self.chunk_bytes:
            self._hand_over(None)

    def add_rows(self, rows: dict[str, Sequence[Any]], sizes: Sequence[int],
                 tags: Sequence[Any] | None = None) -> None:
        """Add `len(sizes)` samples given column by column, `sizes[i]` being row i's
        `sample_nbytes`; the shards and chunks cut are the ones adding them one by one would
        cut. Where they fall is searched for, not stepped to row by row: a text task brings
        thousands of rows, and this runs on the thread that feeds the writer."""
        total = np.cumsum(np.asarray(sizes, dtype=np.int64))  # bytes of rows 0..i
        start, count = 0, len(total)
        while start < count:
            before = int(total[start - 1]) if start else 0
            # The first row that would take the shard past its target (never its only row)...
            cut = int(np.searchsorted(total, self.target_bytes - self._bytes + before, "right"))
            cut = max(cut, start if self._rows else start + 1)
            # ...and the row that fills the chunk.
            full = int(np.searchsorted(total, self.chunk_bytes - self._chunk_bytes + before,
                                       "left"))
            if cut < count and cut <= full:
                self._take(rows, start, cut)
                self.cut(tags[cut] if tags is not None else None)
                start = cut
            elif full < count:
                self._take(rows, start, full + 1)
                self._bytes += int(total[full]) - before
                self._hand_over(None)
                start = full + 1
            else:
                self._take(rows, start, count)
                self._bytes += int(total[-1]) - before
                self._chunk_bytes += int(total[-1]) - before
                start = count

    def _take(self, rows: dict[str, Sequence[Any]], start: int, stop: int) -> None:
        if stop > start:
            self._chunk.extend(rows, start, stop)
            self._rows += stop - start

    def cut(self, tag: Any = None) -> None:
        """End the shard being filled (none if empty): its last chunk and its closing go to the
        background writer."""
        if not self._rows:
            return
        self._hand_over((self._rows, tag))
        self.next_index += 1
        self._rows = 0
        self._bytes = 0

    def _hand_over(self, closing: tuple[int, Any] | None) -> None:
        """The chunk filled so far to the background writer, then, given `closing` (the shard's
        rows and tag), the shard's closing."""
        self.wait()  # the chunk written before: its buffers fill next
        chunk, self._chunk = self._chunk, self._spare
        self._spare = chunk
        self._chunk.clear()
        self._chunk_bytes = 0
        if self._background is None:
            self._background = ThreadPoolExecutor(1, thread_name_prefix="shard-writer")
        name = shard_name(self.next_index, self.shard_format, self.prefix)
        self._writing = self._background.submit(self._write, name, chunk, closing)

    def wait(self) -> None:
        """Until the chunk being written is written; its error, if any, is raised here."""
        writing, self._writing = self._writing, None
        if writing is not None:
            writing.result()

    def flush(self, tag: Any = None) -> ShardInfo | None:
        """Write the buffered samples as one shard and wait until every shard is written;
        returns that shard (None if the buffer was empty)."""
        cutting = self._rows > 0
        self.cut(tag)
        self.wait()
        self._wait_finishing()
        return self.shards[-1] if cutting else None

    def _wait_finishing(self) -> None:
        """Until the last shard cut is published; its error, if any, is raised here. Called
        by the background thread, or once it is idle."""
        finishing, self._finishing = self._finishing, None
        if finishing is not None:
            finishing.result()

    def close(self) -> None:
        """Stop the background writer, after the chunk it is writing (its error is dropped:
        close runs when the run already failed, or after `flush` raised it); a shard left
        unfinished stays under its temporary name."""
        with contextlib.suppress(Exception):
            self.wait()
        with contextlib.suppress(Exception):
            self._wait_finishing()
        for executor in (self._background, self._finisher):
            if executor is not None:
                executor.shutdown(wait=True)
        self._background = self._finisher = None
        if self._open is not None:
            self._open.abandon()
            self._open = None

    def _write(self, name: str, chunk: ChunkColumns, closing: tuple[int, Any] | None) -> None:
        """On the background thread: append `chunk` (if it has rows) to shard `name`, opened on
        its first chunk, then close the shard as `closing` says."""
        tmp = self.directory / (name + ".tmp")
        if chunk.rows:
            if self._open is None:
                self._open = ShardFile(tmp, self.shard_format, self.columns)
            self._open.append(chunk)
        if closing is None:
            return
        rows, tag = closing
        shard, self._open = self._open, None
        assert shard is not None, "a shard is closed only after rows were appended"
        digest = shard.end()
        self._wait_finishing()  # the shard before: published in order, one fsync at a time
        if self._finisher is None:
            self._finisher = ThreadPoolExecutor(1, thread_name_prefix="shard-finisher")
        self._finishing = self._finisher.submit(self._publish, shard, name, rows, tag, digest)

    def _publish(self, shard: ShardFile, name: str, rows: int, tag: Any, digest: str) -> None:
        """On the finishing thread: make the shard durable, rename it into place, say so."""
        shard.sync()
        final = self.directory / name
        os.replace(self.directory / (name + ".tmp"), final)
        info = ShardInfo(name=name, rows=rows, bytes=final.stat().st_size, hash=digest)
        self.shards.append(info)
        if self.on_shard is not None:
            self.on_shard(info, tag)
