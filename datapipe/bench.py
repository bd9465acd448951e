"""`datapipe bench DATASET`: how fast the loader delivers batches of a dataset, with given
settings, and the decode ceiling it is measured against: the same crops decoded by the same
code on as many processes, with no batching or hand-off (`datapipe bench --suite`, datapipe
against its peers, is datapipe.suite).

A rate timed over a few batches or a fraction of a second is start-up and noise, not a
throughput: the loader runs on (more epochs) until it has timed at least MIN_TIMED_BATCHES
batches and MIN_TIMED_SECONDS, and says so when that took more than asked; the ceiling makes
passes over the images for as long.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MIN_TIMED_SECONDS = 2.0
MIN_TIMED_BATCHES = 20


@dataclass(frozen=True)
class BenchResult:
    samples: int
    seconds: float
    first_batch_seconds: float
    batches: int
    warmup_batches: int = 1  # delivered before the clock started: one per worker
    epochs: int = 0          # passes begun, the warm-up's included
    # What was asked for (the --epochs or --batches), timed alone, when it fell short of the
    # minimum and the loader ran on: (batches, seconds).
    asked: tuple[int, float] | None = None

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds if self.seconds else 0.0


def long_enough(batches: int, seconds: float) -> bool:
    """Whether a rate timed over this much is a throughput, not start-up and noise."""
    return batches >= MIN_TIMED_BATCHES and seconds >= MIN_TIMED_SECONDS


class _Clock:
    """Batches and samples timed after a warm-up of one batch per worker: the workers start
    together, so their first batches arrive together, and timing from the first one would
    count the others as made in no time. Also the figures when the asked-for work was done."""

    def __init__(self, started: float, warmup: int) -> None:
        self.started, self.warmup, self.delivered = started, warmup, 0
        self.clock, self.first = 0.0, 0.0
        self.samples = self.batches = 0
        self.asked: tuple[int, float] | None = None

    def tick(self, samples: int) -> None:
        now = time.perf_counter()
        self.delivered += 1
        if self.delivered == 1:
            self.first = now - self.started
        if self.delivered == self.warmup:
            self.clock = now
        elif self.delivered > self.warmup:
            self.samples += samples
            self.batches += 1

    def elapsed(self) -> float:
        return time.perf_counter() - self.clock if self.delivered >= self.warmup else 0.0

    def asked_done(self) -> None:
        if self.asked is None:
            self.asked = (self.batches, self.elapsed())

    def done(self) -> bool:
        return self.asked is not None and long_enough(self.batches, self.elapsed())


def bench_loader(path: str | Path, *, batch_size: int, num_workers: int, decode: str,
                 crop: int, epochs: int, seed: int = 0, batches: int = 0,
                 verify: str = "cheap", device: str = "cpu") -> BenchResult:
    """Iterate `epochs` epochs, or with `batches`, as many as it takes to time that many
    batches, and on while fewer than MIN_TIMED_BATCHES batches or MIN_TIMED_SECONDS are timed.
    The clock starts once each worker has delivered a batch (start-up, which includes hashing
    the shards with verify="open", is reported apart: `first_batch_seconds`). On
    device="cuda" batches arrive on the GPU by the loader's own path, and the clock stops only
    once the GPU has finished with them."""
    import datapipe as dp
    from datapipe.loader.device import resolve_device

    finish = _device_sync(resolve_device(device))
    dp.Loader  # noqa: B018 - import torch and the loader before the clock starts
    clock = _Clock(time.perf_counter(), warmup=max(1, num_workers))
    with dp.Loader(path, batch_size=batch_size, num_workers=num_workers, decode=decode,
                   transform=loader_transform(crop), seed=seed, verify=verify,
                   device=device) as loader:
        epoch = _run(loader, clock, epochs, batches)
        finish()
        elapsed = clock.elapsed()
    asked = clock.asked if clock.asked and not long_enough(*clock.asked) else None
    return BenchResult(clock.samples, elapsed, clock.first, clock.batches, clock.warmup, epoch,
                       asked)


def _run(loader: Any, clock: _Clock, epochs: int, batches: int) -> int:
    """Epochs until the clock has timed what was asked and the minimum; the epochs begun."""
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        delivered = 0
        for batch in loader:
            delivered += 1
            clock.tick(int(batch["image"].shape[0]))
            if batches and clock.batches >= batches:
                clock.asked_done()
            if clock.done():
                return epoch + 1
        epoch += 1
        if not batches and epoch >= epochs:
            clock.asked_done()
        if clock.done() or not delivered:  # an epoch of nothing would never end
            return epoch


def loader_transform(crop: int) -> Any:
    """What `datapipe bench` asks the loader for: RandomResizedCrop(crop) + flip."""
    import datapipe as dp

    return dp.image.RandomResizedCrop(crop) | dp.image.HorizontalFlip()


def _device_sync(device: Any) -> Callable[[], None]:
    """What waits for the device's queued work (copies, transforms): nothing on the CPU."""
    import torch

    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


@dataclass(frozen=True)
class CeilingResult:
    images: int
    seconds: float
    passes: int  # over the images: as many as it took to time MIN_TIMED_SECONDS

    @property
    def images_per_second(self) -> float:
        return self.images / self.seconds if self.seconds else 0.0


def decode_ceiling(path: str | Path, workers: int, limit: int | None = None) -> float:
    """Plain decode of every stored image at full size (no crop, no batching) on `workers`
    processes, once: the benchmark suite's yardstick. Returns images per second. A loader that
    decodes only its crops' region can beat it: `crop_ceiling` is the ceiling of that work."""
    return _decode_on_pool(path, workers, limit, crop=None, seed=0,
                           min_seconds=0.0).images_per_second


def crop_ceiling(path: str | Path, workers: int, crop: int, limit: int | None = None,
                 seed: int = 0) -> CeilingResult:
    """The loader's own decode work with nothing around it: each image's RandomResizedCrop
    (crop) + flip, planned and decoded by the loader's code (only the crop's region, at a
    reduced DCT scale where the crop allows), on `workers` processes; no batches, queues or
    hand-off. A loader with those settings does all of this and more, so this is its ceiling.
    Passes over the images repeat until MIN_TIMED_SECONDS are timed."""
    return _decode_on_pool(path, workers, limit, crop=crop, seed=seed,
                           min_seconds=MIN_TIMED_SECONDS)


def _decode_on_pool(path: str | Path, workers: int, limit: int | None, *, crop: int | None,
                    seed: int, min_seconds: float) -> CeilingResult:
    import multiprocessing as mp

    from datapipe.format.dataset import Dataset

    with Dataset(path) as ds:
        n = len(ds) if limit is None else min(limit, len(ds))
    chunks = np.array_split(np.arange(n), workers * 4)
    context = mp.get_context("fork")
    with context.Pool(workers, initializer=_open_dataset, initargs=(path, crop)) as pool:
        pool.map(_decode_range, [(c[:8], crop, seed, -1, k) for k, c in enumerate(chunks)])
        started, decoded, passes = time.perf_counter(), 0, 0
        while True:  # warm above: the pool started, the page cache and decoder touched
            decoded += sum(pool.map(_decode_range, [(c, crop, seed, passes, k)
                                                    for k, c in enumerate(chunks)]))
            passes += 1
            elapsed = time.perf_counter() - started
            if elapsed >= min_seconds or not n:
                return CeilingResult(decoded, elapsed, passes)


_DATASET: Any = None
_SIZES: tuple[np.ndarray, np.ndarray, str] | None = None  # heights, widths, encoding


def _open_dataset(path: Any, crop: int | None) -> None:
    """A pool process's dataset, and for crops the stored sizes the crops are planned from
    (the node's memory maps of them, as the loader's workers read them)."""
    global _DATASET, _SIZES
    from datapipe.format.dataset import Dataset

    _DATASET = Dataset(path)
    if crop is not None:
        _SIZES = (_DATASET.scalar_map("height"), _DATASET.scalar_map("width"),
                  _DATASET.manifest.settings.get("encoding", "jpeg"))


def ceiling_decoder() -> str:
    """The fastest decoder the loader itself uses: the ceiling is measured with it."""
    from datapipe.image.cpu_decode import decode_region

    return "libjpeg-turbo (datapipe's extension)" if decode_region else "PIL"


def _decode_range(task: tuple[np.ndarray, int | None, int, int, int]) -> int:
    """Decode the images at `indices`: whole and full size (crop None), or as the loader
    decodes its RandomResizedCrop(crop) + flip of them."""
    indices, crop, seed, passes, chunk = task
    if crop is None:
        _decode_whole(indices)
        return len(indices)
    from datapipe.image.cpu_decode import decode_into
    from datapipe.image.transforms import as_pipeline, plan_crops

    all_heights, all_widths, encoding = _SIZES
    heights, widths = all_heights[indices], all_widths[indices]
    rng = np.random.default_rng([seed, passes + 1, chunk])
    boxes, flips = plan_crops(as_pipeline(loader_transform(crop)), heights, widths, rng)
    out = np.empty((crop, crop, 3), np.uint8)
    for j, i in enumerate(indices.tolist()):
        data = _payload(i)
        decode_into(data, encoding, int(heights[j]), int(widths[j]), boxes[j], bool(flips[j]),
                    out)
    return len(indices)


def _payload(index: int) -> bytes:
    k, row = _DATASET.locate(index)
    return _DATASET.shard(k).payload("image", row).tobytes()


def _decode_whole(indices: np.ndarray) -> None:
    import io

    from PIL import Image

    from datapipe.image.cpu_decode import decode_region

    big = 1 << 30
    for i in indices.tolist():
        data = _payload(i)
        if decode_region is not None:
            decode_region(data, 0, 0, big, big, 1)  # the whole image, full size
        else:
            Image.open(io.BytesIO(data)).load()
