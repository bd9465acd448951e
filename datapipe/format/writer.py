"""Rolls samples into shards of a target size; each shard is written atomically."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from datapipe.format.hashing import hash_file
from datapipe.format.manifest import SHARD_SUFFIX, ShardInfo
from datapipe.format.schema import Column
from datapipe.format.shard_reader import write_shard

_SCALAR_BYTES = 8


def shard_name(index: int, shard_format: str) -> str:
    return f"shard-{index:05d}{SHARD_SUFFIX[shard_format]}"


def sample_nbytes(columns: tuple[Column, ...], sample: dict[str, Any]) -> int:
    """Approximate stored size of one sample, used to cut shards near the target size."""
    total = 0
    for col in columns:
        value = sample[col.name]
        if isinstance(value, np.ndarray):
            total += value.nbytes
        elif isinstance(value, (bytes, bytearray, memoryview, str)):
            total += len(value)
        else:
            total += _SCALAR_BYTES
    return total


class ShardSetWriter:
    """Buffers samples and writes a shard whenever the next sample would pass `target_bytes`.

    Samples are never split across shards. A shard is written to a temporary name, fsynced and
    renamed, then `on_shard(info)` is called: a reader never sees a partial shard.
    """

    def __init__(self, directory: str | Path, columns: tuple[Column, ...], shard_format: str,
                 target_bytes: int, first_index: int = 0,
                 on_shard: Callable[[ShardInfo], None] | None = None) -> None:
        self.directory = Path(directory)
        self.columns = columns
        self.shard_format = shard_format
        self.target_bytes = target_bytes
        self.next_index = first_index
        self.on_shard = on_shard
        self.shards: list[ShardInfo] = []
        self._buffer: dict[str, list] = {c.name: [] for c in columns}
        self._rows = 0
        self._bytes = 0

    @property
    def buffered_rows(self) -> int:
        return self._rows

    def add(self, sample: dict[str, Any]) -> None:
        size = sample_nbytes(self.columns, sample)
        if self._rows and self._bytes + size > self.target_bytes:
            self.flush()
        for col in self.columns:
            self._buffer[col.name].append(sample[col.name])
        self._rows += 1
        self._bytes += size

    def flush(self) -> ShardInfo | None:
        """Write the buffered samples as one shard (nothing if the buffer is empty)."""
        if not self._rows:
            return None
        name = shard_name(self.next_index, self.shard_format)
        final = self.directory / name
        tmp = final.with_name(name + ".tmp")
        write_shard(tmp, self.shard_format, self.columns, self._buffer)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
        info = ShardInfo(name=name, rows=self._rows, bytes=final.stat().st_size,
                         hash=hash_file(final))
        self.shards.append(info)
        self.next_index += 1
        self._buffer = {c.name: [] for c in self.columns}
        self._rows = 0
        self._bytes = 0
        if self.on_shard is not None:
            self.on_shard(info)
        return info
