"""Hugging Face Accelerate training fed by `dp.Loader`: one process per device, each reading
its own share of every epoch. On a CPU, over the sample that tools/make_sample_data.py makes:

    python -m tools.make_sample_data sample
    python examples/accelerate_train.py sample/images                   # one process
    accelerate launch --multi_gpu --num_processes 2 examples/accelerate_train.py sample/images
    torchrun --nproc_per_node 2 examples/accelerate_train.py sample/images

Make the loader after `Accelerator()`: it takes rank and world size from the process group
that Accelerator sets up. `accelerator.prepare` hands the loader back unchanged (it rewraps
only torch DataLoaders), and it needs nothing from it: every rank already runs the same number
of steps over a disjoint share, so no sample is seen twice and no rank waits on another.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from torch import nn
from torch.nn import functional as F

import datapipe as dp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recording import Recorder, real_ids


def small_cnn(classes: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))


def train(shards: str, epochs: int = 1, batch_size: int = 32, workers: int = 2,
          record: str | None = None) -> dict[str, Any]:
    """Train; returns the steps run and, per epoch, the sample ids this rank trained on."""
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    transform = dp.image.RandomResizedCrop(32) | dp.image.HorizontalFlip() | dp.image.Normalize()
    loader = dp.Loader(shards, batch_size=batch_size, num_workers=workers, seed=0,
                       transform=transform, device=accelerator.device)
    classes = len(dp.Dataset(shards).manifest.classes or ()) or 1000
    model = small_cnn(classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    recorder = Recorder(record)
    seen: list[list[int]] = []
    steps = 0
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        seen.append([])
        for step, batch in enumerate(loader):
            loss = F.cross_entropy(model(batch["image"]), batch["label"])
            optimizer.zero_grad()
            accelerator.backward(loss)  # a gradient all-reduce: ranks step together
            optimizer.step()
            seen[-1].extend(real_ids(batch))
            recorder.batch("train", epoch, step, real_ids(batch), loader.worker_pids)
            steps += 1
    accelerator.print(f"trained {epochs} epochs, {steps} steps per process on "
                      f"{accelerator.num_processes} processes; last loss {loss.item():.3f}")
    return {"rank": accelerator.process_index, "world_size": accelerator.num_processes,
            "steps": steps, "seen": seen}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shards", help="an image dataset made by `datapipe convert images`")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--record", help="write a JSON line per batch to this file")
    args = parser.parse_args(argv)
    train(args.shards, args.epochs, args.batch_size, args.workers, args.record)


if __name__ == "__main__":
    main()
