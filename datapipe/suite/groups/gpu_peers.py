"""The gpu group's runs, each in a fresh child on a CUDA device (gpu.py says what they mean):
datapipe's Loader decoding with DALI or on the CPU against a synthetic training step, and the
host-to-device copy alone against that step. Every loop of steps is timed as per_step_ms says.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from datapipe.suite.fixtures import BATCH, CROP
from datapipe.suite.groups.recipe_peers import built_in

if TYPE_CHECKING:
    import torch

MATMUL_SIZE = 2048
PROBE_MATMULS = 10  # per calibration timing
COPY_ROUNDS = 5  # step-alone and step+copy loops alternate this often (drift hits both)
JITTER = (0.4, 0.4, 0.4, 0.1)  # brightness, contrast, saturation, hue
LOOPS = ("async", "synced")


@dataclass(frozen=True)
class Job:
    """What one measured run gets, passed to the child process as JSON."""

    shards: str
    workers: int
    batches: int = 30  # timed steps per loop
    batch_size: int = BATCH
    step_ms: float = 100.0  # the synthetic step of the loader runs
    dtype: str = "bfloat16"  # Normalize's output
    copy_factor: float = 3.0  # the copy run's step, in multiples of the copy
    seed: int = 0
    classes: int = 0  # of the photos: the recipe's Mixup targets


def matmuls_for(target_ms: float, ms_per_matmul: float) -> int:
    """How many matmuls make a step of about target_ms (at least one)."""
    return max(1, round(target_ms / ms_per_matmul)) if ms_per_matmul > 0 else 1


def per_step_ms(items: Iterator[Any], steps: int, body: Callable[[Any], object],
                wait: Callable[[], None], drain: Callable[[], None]) -> float:
    """Wall-clock ms per item over `steps` items, after one untimed warm-up item.

    `drain` empties the device's queue before the clock starts and before it stops, so work
    still queued counts; `wait` runs after every step (the synced loop's per-step wait)."""
    body(next(items))
    drain()
    start = time.perf_counter()
    for _ in range(steps):
        body(next(items))
        wait()
    drain()
    return (time.perf_counter() - start) * 1e3 / steps


def endless(loader: Any) -> Iterator[dict[str, Any]]:
    if len(loader) == 0:
        raise RuntimeError("the dataset holds fewer images than one batch")
    while True:
        yield from loader  # a finished epoch moves on to the next by itself


def _nothing(_: object = None) -> None:
    pass


def gpu_loop_ms(items: Iterator[Any], body: Callable[[Any], object], steps: int,
                loop: str) -> float:
    """per_step_ms with the GPU drained at both ends and, in the "synced" loop, a wait for the
    current stream after every step, as `loss.item()` does (a prefetch copy on a side stream
    may still be running); the "async" loop never waits."""
    import torch

    wait = (lambda: torch.cuda.current_stream().synchronize()) if loop == "synced" else _nothing
    return per_step_ms(items, steps, body, wait, torch.cuda.synchronize)


def event_ms(fn: Callable[[], object], stream: Any = None) -> float:
    """GPU time of fn's work, by CUDA events recorded on `stream` (None: the current one);
    what fn returns (a copy's target) is kept until its work is done."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):  # a no-op for None
        start.record()
        _kept = fn()
        end.record()
    end.synchronize()
    return start.elapsed_time(end)


class SyntheticStep:
    """Stands in for training: reads the batch, so that it cannot start before the batch is
    there (as a model's first layer), then runs `matmuls` chained 2048 x 2048 fp32 matmuls,
    all on the current stream."""

    def __init__(self, device: torch.device, matmuls: int = 1) -> None:
        import torch

        gen = torch.Generator(device=device).manual_seed(0)
        # Scaled so that the products' values stay ordinary.
        self.a, self.b = (torch.randn((MATMUL_SIZE, MATMUL_SIZE), device=device, generator=gen)
                          * MATMUL_SIZE ** -0.5 for _ in range(2))
        self.c, self.seen = torch.empty_like(self.a), torch.zeros((), device=device)
        self.matmuls = matmuls

    def burn(self, matmuls: int) -> None:
        import torch

        for _ in range(matmuls):
            torch.mm(self.a, self.b, out=self.c)

    def __call__(self, images: torch.Tensor) -> None:
        import torch

        self.seen += images.sum(dtype=torch.float32)
        self.burn(self.matmuls)


def calibrated_step(device: torch.device, target_ms: float) -> SyntheticStep:
    """A step of about target_ms, by the median of five timings of PROBE_MATMULS after one."""
    step = SyntheticStep(device)
    step.burn(PROBE_MATMULS)
    per_matmul = statistics.median(event_ms(lambda: step.burn(PROBE_MATMULS))
                                   for _ in range(5)) / PROBE_MATMULS
    step.matmuls = matmuls_for(target_ms, per_matmul)
    return step


def prefetched_images(hosts: list[torch.Tensor], device: torch.device) -> Iterator[Any]:
    """Endless device batches through datapipe's own side-stream prefetch."""
    from datapipe.loader.device import prefetch_to_device

    batches = ((b, {"image": hosts[b % len(hosts)]}) for b in itertools.count())
    for _, batch in prefetch_to_device(batches, device):
        yield batch["image"]


def copy_run(job: Job) -> dict[str, Any]:
    """The copy alone, by CUDA events on a side stream (the first copy, which pays the
    allocator's and the driver's warm-up, not counted); then the step alone and fed by
    prefetch_to_device, in alternating rounds."""
    import torch

    device, gen = torch.device("cuda", torch.cuda.current_device()), torch.Generator()
    # uint8 N x 3 x 224 x 224 in pinned memory, channels-last like the loader's host batches.
    hosts = [torch.randint(0, 256, (job.batch_size, CROP, CROP, 3), dtype=torch.uint8,
                           generator=gen.manual_seed(seed)).pin_memory().permute(0, 3, 1, 2)
             for seed in range(2)]
    side = torch.cuda.Stream(device=device)
    copy_ms = statistics.median([event_ms(lambda: hosts[0].to(device, non_blocking=True), side)
                                 for _ in range(job.batches + 1)][1:])
    step = calibrated_step(device, job.copy_factor * copy_ms)
    resident = hosts[0].to(device)
    times: dict[str, list[float]] = {f"{kind}_{loop}_ms": [] for kind in ("step", "both")
                                     for loop in LOOPS}
    for _ in range(COPY_ROUNDS):
        for loop in LOOPS:
            times[f"step_{loop}_ms"].append(
                gpu_loop_ms(itertools.repeat(resident), step, job.batches, loop))
            times[f"both_{loop}_ms"].append(
                gpu_loop_ms(prefetched_images(hosts, device), step, job.batches, loop))
    nbytes = hosts[0].numel() * hosts[0].element_size()
    return {"gpu": torch.cuda.get_device_name(device), "torch": torch.__version__,
            "cuda": torch.version.cuda or "", "batch_mb": nbytes / 1e6, "copy_ms": copy_ms,
            "copy_gbps": nbytes / copy_ms / 1e6, "matmuls": step.matmuls,
            **{key: statistics.median(values) for key, values in times.items()}}


def gpu_transform(dtype: str) -> Any:
    import datapipe as dp

    return (dp.image.RandomResizedCrop(CROP) | dp.image.HorizontalFlip()
            | dp.image.ColorJitter(*JITTER) | dp.image.Normalize(dtype=dtype))


def loader_run(job: Job, decode: str, recipe: bool = False) -> dict[str, Any]:
    """The step alone (before any loader exists), then the loader alone, then both; the
    loader's transform gpu_transform's, or with `recipe` the timm-style recipe of datapipe's
    built-in steps (recipe_peers), its batch forms running on the GPU."""
    import torch

    import datapipe as dp

    device = torch.device("cuda", torch.cuda.current_device())  # with its index: DALI's wish
    step = calibrated_step(device, job.step_ms)
    # What the loader hands out: N x 3 x H x W in channels-last memory.
    resident = torch.empty(job.batch_size, 3, CROP, CROP, device=device,
                           dtype=getattr(torch, job.dtype),
                           memory_format=torch.channels_last).zero_()
    result: dict[str, Any] = {"gpu": torch.cuda.get_device_name(device), "matmuls": step.matmuls,
                              **{f"step_{loop}_ms": gpu_loop_ms(itertools.repeat(resident), step,
                                                                job.batches, loop)
                                 for loop in LOOPS}}
    created = time.perf_counter()
    with dp.Loader(job.shards, batch_size=job.batch_size, shuffle=True, seed=job.seed,
                   num_workers=job.workers, decode=decode,
                   transform=built_in(job.classes, job.dtype) if recipe
                   else gpu_transform(job.dtype),
                   device=device, drop_last=True) as loader:
        batches = (batch["image"] for batch in endless(loader))
        first, shape = next(batches), (job.batch_size, 3, CROP, CROP)
        if tuple(first.shape) != shape or not first.is_cuda or first.dtype != resident.dtype:
            raise RuntimeError(f"first batch is {tuple(first.shape)} {first.dtype} on "
                               f"{first.device}, expected {shape} torch.{job.dtype} on cuda")
        torch.cuda.synchronize()
        result["start_s"] = time.perf_counter() - created
        result["loader_ms"] = gpu_loop_ms(batches, _nothing, job.batches, "async")
        for loop in LOOPS:
            result[f"both_{loop}_ms"] = gpu_loop_ms(batches, step, job.batches, loop)
    result["images_per_s"] = job.batch_size * 1e3 / result["loader_ms"]
    return result
