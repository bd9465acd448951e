"""A small but real image-classification training run fed by datapipe's Loader.

Runs on the CPU in about a minute (a narrow CNN at 96 px); on a GPU the same script trains with
channels-last bf16 batches normalised on the device. It is the end-to-end image benchmark and
the profiler's demo:

    python examples/train_images.py SHARDS [--epochs 1] [--device cuda]
    datapipe profile -- python examples/train_images.py SHARDS
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from torch import nn

import datapipe as dp


def small_cnn(classes: int) -> nn.Module:
    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    return nn.Sequential(block(3, 16), block(16, 32), block(32, 64), block(64, 128),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, classes))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shards", help="an image dataset made by `datapipe convert images`")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--crop", type=int, default=96)
    parser.add_argument("--workers", type=int, default=None, help="default: all cores")
    parser.add_argument("--decode", choices=["cpu", "dali"], default="cpu")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--max-steps", type=int, default=0, help="stop early (0 = no limit)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    on_gpu = args.device.startswith("cuda")
    transform = (dp.image.RandomResizedCrop(args.crop) | dp.image.HorizontalFlip()
                 | dp.image.Normalize(dtype="bfloat16" if on_gpu else "float32"))
    loader = dp.Loader(args.shards, batch_size=args.batch_size, num_workers=args.workers,
                       decode=args.decode, transform=transform, device=args.device, seed=0)
    device = loader.device
    classes = len(dp.Dataset(args.shards).manifest.classes or ()) or 1000
    model = small_cnn(classes).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    started, images, step = time.perf_counter(), 0, 0
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                loss = nn.functional.cross_entropy(model(batch["image"]), batch["label"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            images += batch["image"].shape[0]
            step += 1
            if step % 10 == 0:
                print(f"epoch {epoch} step {step}: loss {loss.item():.3f}", flush=True)
            if args.max_steps and step >= args.max_steps:
                break
    elapsed = time.perf_counter() - started
    loader.close()
    print(f"trained {step} steps, {images:,} images in {elapsed:.1f} s: "
          f"{images / elapsed:,.0f} images/s end to end on {device}")


if __name__ == "__main__":
    try:
        main()
    except dp.DatapipeError as exc:  # a bad argument or dataset: one line, not a traceback
        sys.exit(f"train_images.py: error: {exc}")
