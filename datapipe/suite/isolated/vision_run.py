"""torch's side of the recipe group, run by its path under .venv-vision (see
datapipe/suite/groups/vision.py); it imports torch, torchvision, timm and PIL, never datapipe.

    python vision_run.py --one JOB RESULT    measure one run, as every image peer

The recipe as torchvision's classification references and timm's train script write it: in the
DataLoader's workers, on each photo of the folder as PIL opens it, RandomResizedCrop,
RandomHorizontalFlip and RandAugment, then a float tensor, ImageNet's Normalize and
RandomErasing (per-pixel normal noise: timm's "pixel" mode); in the training process, timm's
Mixup/CutMix on each batch, which turns the labels into soft targets.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

MODULES = ("torch", "torchvision.transforms.v2", "timm.data", "PIL.Image")  # before the clock


class PhotoFolder:
    """ImageFolder's contract (sorted class folders -> labels) with a transform of the PIL image."""

    def __init__(self, root: str, transform: Callable[[Any], Any]) -> None:
        classes = sorted(p for p in Path(root).iterdir() if p.is_dir())
        self.items = [(f, label) for label, d in enumerate(classes) for f in sorted(d.iterdir())]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        from PIL import Image

        path, label = self.items[index]
        with Image.open(path) as image:
            return self.transform(image.convert("RGB")), label


def train_transform(job: Any) -> Any:
    """The per-sample part of the recipe, with torchvision's v2 transforms."""
    import torch
    from timm.data.constants import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
    from torchvision.transforms import v2

    recipe = job.recipe
    return v2.Compose([
        v2.RandomResizedCrop(job.crop, antialias=True), v2.RandomHorizontalFlip(),
        v2.RandAugment(**recipe["rand_augment"]), v2.PILToTensor(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD),
        v2.RandomErasing(recipe["erasing"], value="random"), v2.ToPureTensor()])


def recipe_batches(job: Any) -> Iterator[tuple[int, Any]]:
    """(epoch, images) of every batch: the DataLoader's, then timm's Mixup/CutMix on it. Full
    batches only (drop_last), as timm trains: its Mixup pairs each image with another."""
    import torch
    from timm.data import Mixup
    from torch.utils.data import DataLoader

    torch.manual_seed(job.seed)
    mixup = Mixup(**job.recipe["mixup"], num_classes=job.classes)
    loader = DataLoader(PhotoFolder(job.data, train_transform(job)), batch_size=job.batch,
                        shuffle=True, num_workers=job.workers, persistent_workers=True,
                        drop_last=True)
    for epoch in range(job.total_epochs):
        for images, labels in loader:
            images, _ = mixup(images, labels)
            yield epoch, images


def main(argv: list[str]) -> int:
    from clock import measure_one  # beside this file, which is run by its path

    if argv[:1] == ["--one"] and len(argv) == 3:
        measure_one(argv[1], Path(argv[2]), MODULES, recipe_batches, "float32")
        return 0
    print("usage: vision_run.py --one JOB RESULT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
