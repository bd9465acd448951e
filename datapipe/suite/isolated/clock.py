"""How a loader run is clocked, the same for every image loader: images/s and images per
CPU-second over the epochs after the warm-up, the first epoch's own rate, and start-up."""

from __future__ import annotations

import importlib
import json
import os
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def _proc_stats() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU-seconds of it and of the children it has reaped), from /proc."""
    tick, stats = os.sysconf("SC_CLK_TCK"), {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # exited meanwhile
            continue
        fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "; comm may hold spaces
        stats[int(entry)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) / tick)
    return stats


def tree_cpu_seconds(root: int | None = None) -> float:
    """CPU-seconds used so far by process `root` (default: this one), its threads, its live
    descendants and every process they have reaped. The difference of two readings is what a
    tool's whole process tree spent in between, however busy the rest of the machine was.
    NaN where there is no /proc."""
    if not Path("/proc/self/stat").exists():
        return float("nan")
    stats = _proc_stats()
    return sum(stats[pid][1] for pid in _tree(stats, root or os.getpid()))


def _tree(stats: dict[int, tuple[int, float]], root: int) -> list[int]:
    """`root` and its live descendants."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    todo, tree = [root], []
    while todo:
        pid = todo.pop()
        if pid in stats:
            tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


class TreeCPU:
    """tree_cpu_seconds() read at every batch, cheaply: the whole of /proc is scanned for the
    tree's processes only on `rescan` (a loader's workers are made before its first batch, so
    the measured loops rescan at each epoch's first); in between only their own stat files
    are read. A full scan costs ~3 ms of CPU with 66 processes on the 2-core machine: read at
    every batch, as before, it took ~9 % of a core from a loader at 30 batches a second, and
    counted it as the loader's CPU. A process that has exited counts in its parent once
    reaped, as in tree_cpu_seconds."""

    def __init__(self) -> None:
        self._pids: list[int] | None = None
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def seconds(self, rescan: bool) -> float:
        if not Path("/proc/self/stat").exists():
            return float("nan")
        if rescan or self._pids is None:
            stats = _proc_stats()
            self._pids = _tree(stats, os.getpid())
            return sum(stats[pid][1] for pid in self._pids)
        return sum(self._own(pid) for pid in self._pids)

    def _own(self, pid: int) -> float:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:  # exited and reaped: its CPU is in its parent's now
            return 0.0
        fields = text[text.rindex(")") + 2:].split()
        return sum(int(f) for f in fields[11:15]) / self._tick


def check_batch(images: Any, batch: int, crop: int | None, dtype: str = "uint8") -> None:
    """Proof that the tool did the whole job: a full batch of crop x crop CHW images of
    `dtype` (uint8; float32 where the job ends with a Normalize); crop None: of any size (a
    bucketed batch's is its bucket's)."""
    import torch

    side = (crop, crop) if crop is not None else tuple(images.shape[2:])
    shape = (batch, 3, *side)
    if tuple(images.shape) != shape or images.dtype != getattr(torch, dtype):
        raise RuntimeError(f"first batch is {tuple(images.shape)} {images.dtype}, "
                           f"expected {shape} torch.{dtype}")


def measure(batches: Iterator[tuple[int, Any]], job: Any, crop: int | None,
            dtype: str = "uint8") -> dict[str, Any]:
    """Images/s, and images per CPU-second of the whole process tree, over the epochs after
    the warm-up: the clock starts when the warm-up's last batch arrives (with no warm-up, at
    the first batch, which is then not counted) and stops when the last batch arrives, so
    shutting the tool's workers down is not counted. Also the first epoch's own images/s,
    from its first batch on: what a job too short to warm up sees, and output pixels/s (for
    batches of many sizes: crop None). `batches` yields (epoch, images) of `dtype`; `job` has
    batch, warmup and total_epochs."""
    started = time.perf_counter()
    per_epoch, pixels = [0] * job.total_epochs, [0] * job.total_epochs
    arrivals: list[tuple[int, float, float]] = []  # (epoch, seconds, tree CPU seconds)
    cpu_clock = TreeCPU()
    for epoch, images in batches:
        if not arrivals:
            check_batch(images, job.batch, crop, dtype)
            first_pixels = images.shape[0] * images.shape[-2] * images.shape[-1]
        rescan = not arrivals or arrivals[-1][0] != epoch
        arrivals.append((epoch, time.perf_counter(), cpu_clock.seconds(rescan)))
        per_epoch[epoch] += len(images)
        pixels[epoch] += len(images) * images.shape[-2] * images.shape[-1]
    first_size = min(job.batch, per_epoch[0])
    # The clock starts at the arrival before the first measured batch.
    start = max(0, next(i for i, a in enumerate(arrivals) if a[0] >= job.warmup) - 1)
    measured = sum(per_epoch[job.warmup:]) - (0 if job.warmup else first_size)
    measured_pixels = sum(pixels[job.warmup:]) - (0 if job.warmup else first_pixels)
    seconds = arrivals[-1][1] - arrivals[start][1]
    cpu = arrivals[-1][2] - arrivals[start][2]
    first_epoch_s = max(a[1] for a in arrivals if a[0] == 0) - arrivals[0][1]
    return {"images": measured, "seconds": seconds,
            "rate": measured / seconds if seconds > 0 else 0.0,
            "cpu_s": cpu, "cpu_rate": measured / cpu if cpu > 0 else 0.0,
            "pixels": measured_pixels,
            "pixel_rate": measured_pixels / seconds if seconds > 0 else 0.0,
            "cpu_pixel_rate": measured_pixels / cpu if cpu > 0 else 0.0,
            "first_epoch_rate": ((per_epoch[0] - first_size) / first_epoch_s
                                 if first_epoch_s > 0 else 0.0),
            "start_s": arrivals[0][1] - started, "epoch_images": per_epoch}


def measure_one(job_json: str, result_file: Path, modules: tuple[str, ...],
                batches: Callable[[Any], Iterator[tuple[int, Any]]], dtype: str = "uint8") -> None:
    """One run of a tool in a venv of its own, in this fresh process: `modules` imported (not
    clocked), then batches(job) measured, the record written as write_result does. The job
    (JSON) has the fields measure() reads, and crop."""
    fields = json.loads(job_json)
    job = SimpleNamespace(**fields, total_epochs=fields["warmup"] + fields["epochs"])

    def run() -> dict[str, Any]:
        start = time.perf_counter()
        for module in modules:
            importlib.import_module(module)
        import_s = time.perf_counter() - start
        return {**measure(batches(job), job, job.crop, dtype), "import_s": import_s}
    write_result(result_file, run)


def write_result(result_file: Path, run: Callable[[], dict[str, Any]]) -> None:
    """run()'s record to result_file as JSON; should the tool fail, {"error": one line}
    instead (the traceback goes to the log), so that the table can say what went wrong."""
    try:
        result = run()
    except Exception as exc:  # the tool's own failure: one line for the table, the log has all
        traceback.print_exc()
        result = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
    result_file.write_text(json.dumps(result))
