"""`datapipe bench DATASET`: how fast the loader delivers batches of a dataset, with given
settings, and the decode-only ceiling it is measured against (`datapipe bench --suite`, datapipe
against its peers, is datapipe.suite)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class BenchResult:
    samples: int
    seconds: float
    first_batch_seconds: float
    batches: int

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds if self.seconds else 0.0


def bench_loader(path: str | Path, *, batch_size: int, num_workers: int, decode: str,
                 crop: int, epochs: int, seed: int = 0, batches: int = 0,
                 verify: str = "cheap", device: str = "cpu") -> BenchResult:
    """Iterate `epochs` epochs, or with `batches`, as many as it takes to time that many
    batches; the clock starts after the first batch (start-up, which includes hashing the
    shards with verify="open", is reported separately as `first_batch_seconds`). On
    device="cuda" batches arrive on the GPU by the loader's own path, and the clock stops
    only once the GPU has finished with them."""
    import itertools

    import datapipe as dp
    from datapipe.loader.device import resolve_device

    finish = _device_sync(resolve_device(device))

    transform = dp.image.RandomResizedCrop(crop) | dp.image.HorizontalFlip()
    dp.Loader  # noqa: B018 - import torch and the loader before the clock starts
    started = time.perf_counter()
    with dp.Loader(path, batch_size=batch_size, num_workers=num_workers, decode=decode,
                   transform=transform, seed=seed, verify=verify, device=device) as loader:
        samples, timed, first, clock = 0, 0, None, None
        for epoch in itertools.count() if batches else range(epochs):
            loader.set_epoch(epoch)
            for batch in loader:
                if first is None:
                    first = time.perf_counter() - started
                    clock = time.perf_counter()
                    continue
                samples += int(batch["image"].shape[0])
                timed += 1
                if timed == batches:
                    break
            if batches and (timed == batches or len(loader) == 0):
                break
        finish()
        elapsed = time.perf_counter() - clock if clock else 0.0
    return BenchResult(samples, elapsed, first or 0.0, timed)


def _device_sync(device: Any) -> Any:
    """What waits for the device's queued work (copies, transforms): nothing on the CPU."""
    import torch

    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def decode_ceiling(path: str | Path, workers: int, limit: int | None = None) -> float:
    """Plain decode of every stored image (no crop, no batching) on `workers` processes:
    the figure a loader's throughput is measured against. Returns images per second."""
    import multiprocessing as mp

    from datapipe.format.dataset import Dataset

    with Dataset(path) as ds:
        n = len(ds) if limit is None else min(limit, len(ds))
    chunks = np.array_split(np.arange(n), workers * 4)
    context = mp.get_context("fork")
    with context.Pool(workers, initializer=_open_dataset, initargs=(path,)) as pool:
        pool.map(_decode_range, [c[:8] for c in chunks])  # warm the pool and page cache
        started = time.perf_counter()
        decoded = sum(pool.map(_decode_range, chunks))
        return decoded / (time.perf_counter() - started)


_DATASET = None


def _open_dataset(path: Any) -> None:
    global _DATASET
    from datapipe.format.dataset import Dataset

    _DATASET = Dataset(path)


def ceiling_decoder() -> str:
    """The fastest full decoder the loader itself uses: the ceiling is measured with it."""
    from datapipe.image.cpu_decode import decode_region

    return "libjpeg-turbo (datapipe's extension)" if decode_region else "PIL"


def _decode_range(indices: np.ndarray) -> int:
    import io

    from PIL import Image

    from datapipe.image.cpu_decode import decode_region

    big = 1 << 30
    for i in indices.tolist():
        k, row = _DATASET.locate(i)
        data = _DATASET.shard(k).payload("image", row).tobytes()
        if decode_region is not None:
            decode_region(data, 0, 0, big, big, 1)  # the whole image, full size
        else:
            Image.open(io.BytesIO(data)).load()
    return len(indices)
