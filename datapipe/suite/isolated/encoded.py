"""The already-encoded samples the convert group's writers are fed (datapipe's DatasetWriter,
Streaming's MDSWriter, the disk itself), and their figure; beside clock.py so that a writer in
a venv of its own is fed the very same samples. Standard library only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

SAMPLE_BYTES = 200_000  # a photo-sized sample
POOL_BYTES = 32 << 20  # random bytes the samples are cut from (incompressible, like JPEGs)


def samples(pool: bytes, megabytes: int) -> Iterator[bytes]:
    """megabytes * 1e6 / SAMPLE_BYTES samples cut from `pool`, each a fresh bytes object."""
    for index in range(megabytes * 1_000_000 // SAMPLE_BYTES):
        start = (index * 7919 * 4096) % (POOL_BYTES - SAMPLE_BYTES)
        yield pool[start:start + SAMPLE_BYTES]


def rate(count: int, seconds: float) -> dict[str, Any]:
    """A writer's record: MB/s of sample bytes."""
    return {"items": count, "bytes": count * SAMPLE_BYTES, "seconds": seconds,
            "rate": count * SAMPLE_BYTES / seconds / 1e6}
