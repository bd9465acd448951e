"""Writing one shard file, a chunk of rows at a time, hashed as its bytes are written."""

from __future__ import annotations

import os
from pathlib import Path

from datapipe.format.chunk_columns import ChunkColumns
from datapipe.format.hashing import HashingWriter
from datapipe.format.schema import Column
from datapipe.format.shard_formats import get_format
from datapipe.format.shard_stream import ShardStream


class ShardFile:
    """One shard being written at `path`, its rows appended a chunk at a time, so a large shard
    is on disk (and hashed) while its last rows are still being made; `end`, then `sync`,
    close it."""

    def __init__(self, path: str | Path, shard_format: str, columns: tuple[Column, ...]) -> None:
        stream = get_format(shard_format, path).codec.stream
        self._file = open(path, "wb")  # noqa: SIM115 - closed by end(), sync() or abandon()
        self._sink = HashingWriter(self._file)
        try:
            self._stream: ShardStream = stream(self._sink, columns)
        except BaseException:
            self._file.close()
            raise

    def append(self, chunk: ChunkColumns) -> None:
        """Append a chunk's rows."""
        self._stream.append(chunk)

    def end(self) -> str:
        """Write the format's closing bytes; returns the hash of the file's bytes, taken as
        they were written. `sync` then makes them durable."""
        try:
            self._stream.finish()
            self._file.flush()
        except BaseException:
            self._file.close()
            raise
        return self._sink.hash()

    def sync(self) -> None:
        """fsync and close (from any thread: the writing one goes on with the next shard)."""
        with self._file:
            os.fsync(self._file.fileno())

    def abandon(self) -> None:
        """Close without finishing (the run failed): the partial file stays for the next run to
        clear."""
        self._file.close()

