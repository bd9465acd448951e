"""MosaicML Streaming's MDSWriter as a peer of the convert group, run by its path under
.venv-vision (see datapipe/suite/groups/vision.py); it imports Streaming, torch, webdataset,
pyarrow and PIL, never datapipe.

    python mds_run.py --one JOB RESULT    convert once, clocked from before the imports

As Streaming's users write a conversion: a torch DataLoader whose `workers` processes read the
WebDataset tars (webdataset's pipeline, whole tars per worker) or the Parquet files (row groups
dealt out to the workers) and re-encode each photo as the other peers do (reencode.py), and
one MDSWriter in this process writing what they hand it. JOB: src, out, workers, source ("tars"
or "parquet"), shard_bytes. With source "writer": MDSWriter fed the writer row's already-encoded
samples (encoded.py) from this process, `megabytes` of them.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# What each source's run imports (clocked, as the other convert peers' imports are).
MODULES = {"tars": ("torch.utils.data", "streaming", "webdataset", "PIL.Image"),
           "parquet": ("torch.utils.data", "streaming", "pyarrow.parquet", "PIL.Image")}
COLUMNS = {"image": "bytes", "label": "int"}


def tar_samples(src: str) -> Any:
    import webdataset as wds
    from reencode import plain_transform  # beside this file, which is run by its path

    tars = sorted(map(str, Path(src).glob("*.tar")))
    return (wds.WebDataset(tars, shardshuffle=False, nodesplitter=wds.split_by_node)
            .to_tuple("jpg", "cls").map(lambda s: plain_transform(s[0], int(s[1]))))


def parquet_samples(src: str) -> Any:
    from reencode import parquet_row_groups, parquet_samples
    from torch.utils.data import IterableDataset, get_worker_info

    class RowGroups(IterableDataset):  # each worker its share of the files' row groups
        def __iter__(self) -> Any:
            worker, groups = get_worker_info(), parquet_row_groups(Path(src))
            for item in groups[worker.id::worker.num_workers] if worker else groups:
                yield from parquet_samples(item)

    return RowGroups()


def write(samples: Iterable[dict[str, Any]], out: str, shard_bytes: int) -> int:
    from streaming import MDSWriter

    count = 0
    with MDSWriter(out=out, columns=COLUMNS, size_limit=shard_bytes) as writer:
        for sample in samples:
            writer.write({"image": sample["image"], "label": int(sample["label"])})
            count += 1
    return count


def convert(job: dict[str, Any]) -> dict[str, Any]:
    """The conversion, clocked from before the imports as the other convert peers are."""
    start = time.perf_counter()
    for module in MODULES[job["source"]]:
        importlib.import_module(module)
    import_s = time.perf_counter() - start
    from torch.utils.data import DataLoader

    dataset = {"tars": tar_samples, "parquet": parquet_samples}[job["source"]](job["src"])
    loader = DataLoader(dataset, batch_size=None, num_workers=job["workers"])
    count = write(loader, job["out"], job["shard_bytes"])
    seconds = time.perf_counter() - start
    return {"items": count, "seconds": seconds, "import_s": import_s, "rate": count / seconds}


def write_encoded(job: dict[str, Any]) -> dict[str, Any]:
    """MB/s, clocked as datapipe's writer is: from the writer's creation (imports before) to
    the data on the disk. MDSWriter does not fsync, so each file it wrote is, on the clock."""
    import os

    from encoded import POOL_BYTES, rate, samples
    from streaming import MDSWriter

    pool, count, start = os.urandom(POOL_BYTES), 0, time.perf_counter()
    with MDSWriter(out=job["out"], columns={"data": "bytes", "label": "int"},
                   size_limit=job["shard_bytes"]) as writer:
        for count, payload in enumerate(samples(pool, job["megabytes"]), 1):
            writer.write({"data": payload, "label": count})
    for path in sorted(Path(job["out"]).iterdir()):
        with open(path, "rb+") as file:
            os.fsync(file.fileno())
    return rate(count, time.perf_counter() - start)


def main(argv: list[str]) -> int:
    from clock import write_result  # beside this file, which is run by its path

    if argv[:1] == ["--one"] and len(argv) == 3:
        job = json.loads(argv[1])
        write_result(Path(argv[2]), lambda: (write_encoded if job["source"] == "writer"
                                              else convert)(job))
        return 0
    print("usage: mds_run.py --one JOB RESULT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
