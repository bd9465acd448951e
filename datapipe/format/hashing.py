"""Content hashes of shard files (xxh3-128: fast enough to re-hash a dataset at disk speed)."""

from __future__ import annotations

from pathlib import Path

import xxhash

HASH_ALGORITHM = "xxh3_128"
_CHUNK = 8 << 20


def hash_file(path: str | Path) -> str:
    """Return `"xxh3_128:<hex>"` of the file's bytes, read in chunks."""
    digest = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return f"{HASH_ALGORITHM}:{digest.hexdigest()}"


def hash_bytes(data: bytes | memoryview) -> str:
    return f"{HASH_ALGORITHM}:{xxhash.xxh3_128_hexdigest(data)}"


class StreamHash:
    """The same digest as hash_file, over bytes fed as they arrive (a download)."""

    def __init__(self) -> None:
        self._digest = xxhash.xxh3_128()

    def update(self, chunk: bytes | memoryview) -> None:
        self._digest.update(chunk)

    def hexdigest(self) -> str:
        return f"{HASH_ALGORITHM}:{self._digest.hexdigest()}"
