"""The writer row of the convert group: dp.DatasetWriter fed already-encoded samples from one
process, against the disk's own sequential write speed measured the same way in the same run
(the same bytes, written in the same sizes, to one file, fsynced). Both report MB/s of sample
bytes, their clocks stopping once the data is on the disk. Streaming's MDSWriter, fed the same
samples, runs in its own venv (isolated/mds_run.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from datapipe.suite.isolated.encoded import POOL_BYTES, SAMPLE_BYTES, rate, samples
from datapipe.suite.runner import Record


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
