"""The writer row of the convert group: dp.DatasetWriter fed already-encoded samples from one
process, against the disk's own sequential write speed measured the same way in the same run
(the same bytes, written in the same sizes, to one file, fsynced). Both report MB/s of sample
bytes, their clocks stopping once the data is on the disk."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from datapipe.suite.runner import Record

SAMPLE_BYTES = 200_000  # a photo-sized sample
POOL_BYTES = 32 << 20  # random bytes the samples are cut from (incompressible, like JPEGs)


def samples(pool: bytes, megabytes: int) -> Iterator[bytes]:
    """megabytes * 1e6 / SAMPLE_BYTES samples cut from `pool`, each a fresh bytes object."""
    for index in range(megabytes * 1_000_000 // SAMPLE_BYTES):
        start = (index * 7919 * 4096) % (POOL_BYTES - SAMPLE_BYTES)
        yield pool[start:start + SAMPLE_BYTES]


def rate(count: int, seconds: float) -> Record:
    return {"items": count, "bytes": count * SAMPLE_BYTES, "seconds": seconds,
            "rate": count * SAMPLE_BYTES / seconds / 1e6}


def datapipe_writer(job: dict[str, Any]) -> Record:
    import pyarrow  # noqa: F401 - imported (the writer's first shard would) before the clock

    import datapipe as dp
    from datapipe.format import arrow_shard  # noqa: F401

    pool, count, start = os.urandom(POOL_BYTES), 0, time.perf_counter()
    with dp.DatasetWriter(job["out"], {"data": "bytes", "label": "int64"}) as writer:
        for count, payload in enumerate(samples(pool, job["megabytes"]), 1):
            writer.write({"data": payload, "label": count})
    return rate(count, time.perf_counter() - start)


def disk(job: dict[str, Any]) -> Record:
    """The same bytes in the same sizes to one file, then fsync: the disk's sequential speed
    as this process sees it."""
    out = Path(job["out"])
    out.mkdir(parents=True)
    pool, count, start = os.urandom(POOL_BYTES), 0, time.perf_counter()
    with open(out / "sequential.bin", "wb") as file:
        for payload in samples(pool, job["megabytes"]):
            count += file.write(payload) // SAMPLE_BYTES
        file.flush()
        os.fsync(file.fileno())
    return rate(count, time.perf_counter() - start)
