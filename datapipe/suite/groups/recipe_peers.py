"""The timm-style training recipe as datapipe's users write it, each a run of the recipe group
(recipe.py): decode, RandomResizedCrop 224, flip, RandAugment(2, 9), ImageNet's Normalize,
RandomErasing 0.25 (per-pixel noise), Mixup 0.8 / CutMix 1.0 with soft targets; and the plain
pipeline with and without a per-sample function that does nothing. The torch DataLoader's side
is datapipe/suite/isolated/vision_run.py, in its own venv; RECIPE goes to both sides.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from datapipe.suite.fixtures import CROP

BATCH = 128
RECIPE: dict[str, Any] = {
    "rand_augment": {"num_ops": 2, "magnitude": 9},  # timm's rand-m9-n2
    "erasing": 0.25,  # timm's "pixel" mode: per-pixel normal noise
    "mixup": {"mixup_alpha": 0.8, "cutmix_alpha": 1.0, "prob": 1.0, "switch_prob": 0.5,
              "mode": "batch", "label_smoothing": 0.1},
}
# datapipe's names each run needs beyond the five transforms it always had.
BUILT_IN = ("RandAugment", "RandomErasing", "Mixup")
USER = ("PerSample", "PerBatch")
NOOP = ("PerSample",)


@dataclass(frozen=True)
class Job:
    """What one measured run gets, passed to the child process as JSON."""

    data: str  # the photo folder (torch) or the datapipe shards
    workers: int
    epochs: int  # measured, after the warm-up ones
    classes: int  # Mixup's soft targets: one column per class of the photos
    warmup: int = 1
    seed: int = 0
    batch: int = BATCH
    crop: int = CROP

    @property
    def total_epochs(self) -> int:
        return self.warmup + self.epochs


def missing(names: tuple[str, ...]) -> str | None:
    """Why a run cannot be made with this datapipe ("skipped: needs dp.Mixup ..."), or None."""
    import datapipe as dp

    absent = [f"dp.{name}" for name in names if step(dp, name) is None]
    return f"skipped: needs {', '.join(absent)} (not in this datapipe)" if absent else None


def step(dp: Any, name: str) -> Any:
    """datapipe's step `name`, from `datapipe` or `datapipe.image`; None if it has none."""
    return getattr(dp, name, None) or getattr(dp.image, name, None)


def built_in(classes: int, dtype: str = "float32") -> Any:
    """The recipe with datapipe's own steps (each batched where the batch lives)."""
    import datapipe as dp

    augment, erase, mix = (step(dp, name) for name in BUILT_IN)
    return (dp.image.RandomResizedCrop(CROP) | dp.image.HorizontalFlip()
            | augment(**RECIPE["rand_augment"]) | dp.image.Normalize(dtype=dtype)
            | erase(RECIPE["erasing"]) | mix(**RECIPE["mixup"], num_classes=classes))


def user_callables(classes: int) -> Any:
    """The same recipe as a user brings it from a torchvision + timm script: datapipe's crop
    and flip, then the script's own torchvision v2 transforms per sample in the workers and
    timm's Mixup per batch. Needs torchvision and timm (the vision venv)."""
    import torch
    from timm.data import Mixup
    from timm.data.constants import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
    from torchvision.transforms import v2

    import datapipe as dp

    per_sample = v2.Compose([
        v2.RandAugment(**RECIPE["rand_augment"]), v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD),
        v2.RandomErasing(RECIPE["erasing"], value="random")])
    return (dp.image.RandomResizedCrop(CROP) | dp.image.HorizontalFlip()
            | step(dp, "PerSample")(per_sample, name="torchvision", dtype="float32")
            | step(dp, "PerBatch")(Mixup(**RECIPE["mixup"], num_classes=classes), name="mixup"))


def unchanged(pixels: Any) -> Any:
    """A user's per-sample function that does nothing (picklable: defined at module level)."""
    return pixels


def plain(noop: bool) -> Any:
    """The plain pipeline, with the do-nothing function in the workers if `noop`."""
    import datapipe as dp

    pipeline = dp.image.RandomResizedCrop(CROP) | dp.image.HorizontalFlip()
    if noop:
        pipeline = pipeline | step(dp, "PerSample")(unchanged, name="unchanged")
    return pipeline | dp.image.Normalize()


def recipe_batches(job: Job, transform: Any) -> Iterator[tuple[int, Any]]:
    """(epoch, images) of every full batch of datapipe's Loader with `transform`."""
    import datapipe as dp

    with dp.Loader(job.data, batch_size=job.batch, shuffle=True, seed=job.seed,
                   num_workers=job.workers, transform=transform, drop_last=True) as loader:
        for epoch in range(job.total_epochs):
            for batch in loader:
                yield epoch, batch["image"]
