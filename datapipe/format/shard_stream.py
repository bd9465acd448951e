"""The one interface both shard writers implement: rows appended in chunks, then the end."""

from __future__ import annotations

from typing import Protocol

from datapipe.format.chunk_columns import ChunkColumns


class ShardStream(Protocol):
    """A shard format's writer: rows appended in chunks, then the closing bytes."""

    def append(self, chunk: ChunkColumns) -> None: ...

    def finish(self) -> None: ...
