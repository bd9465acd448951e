"""The shard formats by name: the one table that knows each format's file suffix, reader,
writer stream and scalar reader. Everything that picks a format asks here.

A format's module (and its library: pyarrow, msgpack) is imported the first time one of its
shards is read or written, not when datapipe is: the table lists names and suffixes, and how to
load the rest. The format modules never import this one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from datapipe.errors import DataError
from datapipe.format.schema import Column
from datapipe.format.shard_reader import ShardReader
from datapipe.format.shard_stream import ShardStream

# (file, size, columns, names) -> the named scalar columns of one shard read by ranges from a
# random-access file, without its payloads. Raises ValueError, OSError, KeyError or TypeError
# on a damaged shard.
ScalarReader = Callable[[Any, int, tuple[Column, ...], list[str]], dict[str, np.ndarray]]


@dataclass(frozen=True)
class Codec:
    """What a format's module provides."""

    reader: type[ShardReader]
    stream: Callable[[BinaryIO, tuple[Column, ...]], ShardStream]
    read_scalars: ScalarReader


@dataclass(frozen=True)
class ShardFormat:
    name: str
    suffix: str
    load: Callable[[], Codec]

    @cached_property
    def codec(self) -> Codec:
        return self.load()


def _arrow() -> Codec:
    from datapipe.format import arrow_shard

    return Codec(arrow_shard.ArrowShardReader, arrow_shard.ArrowShardStream,
                 arrow_shard.read_scalars)


def _msgpack() -> Codec:
    from datapipe.format import msgpack_shard

    return Codec(msgpack_shard.MsgpackShardReader, msgpack_shard.MsgpackShardStream,
                 msgpack_shard.read_scalars)


FORMATS = {f.name: f for f in (ShardFormat("arrow", ".arrow", _arrow),
                                ShardFormat("msgpack", ".msgpack", _msgpack))}
FORMAT_NAMES = tuple(FORMATS)


def get_format(name: str, where: str | Path | None = None) -> ShardFormat:
    """The format called `name`; `where` (a path) begins the error when there is none."""
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        prefix = f"{where}: " if where is not None else ""
        raise DataError(f"{prefix}unknown shard format {name!r}") from None


def open_shard(path: str | Path, shard_format: str, columns: tuple[Column, ...],
               first_sample: int = 0, where: str | None = None,
               dataset: str | None = None, check_index: bool = True) -> ShardReader:
    """Map a shard and check its structure (offsets in range and monotonic; without
    `check_index`, only what costs nothing per row). `where` and `dataset` name the shard and
    its dataset in errors (default: the path and its folder)."""
    reader = get_format(shard_format, path).codec.reader
    return reader(path, columns, first_sample, where, dataset, check_index=check_index)
