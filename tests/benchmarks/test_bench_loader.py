"""How benchmarks/bench_loader.py clocks a run: on fake batches and a fake clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from benchmarks import bench_loader
from benchmarks.bench_loader import Job
from benchmarks.fixtures import BATCH, CROP

IMAGES_PER_EPOCH = 600  # batches of 256, 256, 88


def fake_batches(epochs: int) -> Iterator[tuple[int, torch.Tensor]]:
    full = torch.zeros(BATCH, 3, CROP, CROP, dtype=torch.uint8)
    for epoch in range(epochs):
        for start in range(0, IMAGES_PER_EPOCH, BATCH):
            yield epoch, full[: min(BATCH, IMAGES_PER_EPOCH - start)]


@pytest.fixture
def one_second_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each batch arrives one second (and half a CPU-second) after the previous one."""
    ticks = iter(range(1000))
    now = {"t": 0.0}

    def clock() -> float:
        now["t"] = float(next(ticks))
        return now["t"]

    monkeypatch.setattr(bench_loader.time, "perf_counter", clock)
    monkeypatch.setattr(bench_loader, "tree_cpu_seconds", lambda: now["t"] / 2)


@pytest.mark.usefixtures("one_second_per_batch")
def test_clock_runs_from_the_warmup_s_last_batch() -> None:
    result = bench_loader.measure(fake_batches(3), Job("x", 2, epochs=2, warmup=1))
    # Arrivals at t = 1..9 (t = 0 is the start); epoch 0 ends at t = 3.
    assert result["images"] == 2 * IMAGES_PER_EPOCH
    assert result["seconds"] == 6.0 and result["rate"] == 200.0
    assert result["cpu_s"] == 3.0 and result["cpu_rate"] == 400.0
    assert result["first_epoch_rate"] == (IMAGES_PER_EPOCH - BATCH) / 2.0
    assert result["start_s"] == 1.0
    assert result["epoch_images"] == [IMAGES_PER_EPOCH] * 3


@pytest.mark.usefixtures("one_second_per_batch")
def test_without_warmup_the_clock_starts_at_the_first_batch() -> None:
    result = bench_loader.measure(fake_batches(2), Job("x", 2, epochs=2, warmup=0))
    assert result["images"] == 2 * IMAGES_PER_EPOCH - BATCH
    assert result["seconds"] == 5.0
    assert result["rate"] == (2 * IMAGES_PER_EPOCH - BATCH) / 5.0


def test_warmup_and_epochs_are_checked() -> None:
    with pytest.raises(SystemExit):
        bench_loader.parse_args(["--warmup", "-1"])
    args = bench_loader.parse_args(["--warmup", "0", "--epochs", "3"])
    assert (args.warmup, args.epochs) == (0, 3)
