"""Per-image augmentation on the patch path: the steps a patch loader runs in its workers on
each image decoded at its planned size (H x W x 3 uint8), before the preset's normalisation
and patchify.

Accepted, in the order written: `ColorJitter` (per image here, torchvision's meaning:
augment/color_jitter.py) and any `SampleStep` on uint8 pixels: the user's `PerSample` (a plain
function, a torchvision v2 transform or a torch module), RandAugment and the other recipes.
Each draws its randomness from (seed, epoch, image index, step position) alone, so a rerun and
a resume at any world size or worker count give the same bits. The flip stays planned into the
decode (the loader's `flip=True`).

A step must keep the image's size: the patch grid, the batch's packing and its budget were
planned from the stored size before anything was decoded. A step that returns another size is
refused by name on the first image it does it to; one that cannot keep it (a crop, a resize, a
declared `shape=`) is refused when the loader is made, as are a `Normalize` (the preset
normalises with its own mean and std) and steps that run on whole batches of images (a patch
batch holds patch rows, not images).
"""

from __future__ import annotations

import functools
import time

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.image.augment.color_jitter import factor_ranges, jitter
from datapipe.image.placement import step_name
from datapipe.image.sample_random import SampleGenerators
from datapipe.image.steps import PerSample, SampleStep
from datapipe.image.transforms import (
    CenterCrop,
    ColorJitter,
    HorizontalFlip,
    Normalize,
    RandomResizedCrop,
    Transform,
    as_pipeline,
)
from datapipe.image.worker_steps import StepFailed

# The view number of the steps' keys: the flip draws from view 0 (patch_batches.flips).
STEPS_VIEW = 1


def patch_steps(transform: Transform | None) -> tuple[Transform, ...]:
    """The steps of `transform` a patch loader can run per image, each checked; any other is
    refused in one line naming it and why."""
    steps = as_pipeline(transform).steps
    for step in steps:
        reason = _refusal(step)
        if reason is not None:
            raise ArgumentError(f"{step_name(step)} cannot run in PatchLoader's transform: "
                                f"{reason}")
    return steps


def _refusal(step: Transform) -> str | None:
    if isinstance(step, RandomResizedCrop | CenterCrop):
        return ("each image's patch grid is planned from its stored size by the preset's "
                "resize rule (min_pixels / max_pixels / max_num_patches set it)")
    if isinstance(step, HorizontalFlip):
        return "pass flip=True (mirrors half the images, planned into the decode)"
    if isinstance(step, Normalize):
        return "the preset normalises with image_mean / image_std (pass those instead)"
    if isinstance(step, PerSample) and (step.shape is not None or step.dtype not in
                                         (None, "uint8")):
        return ("a step must return pixels of the image's own size, uint8: the patch grid "
                "is planned from the stored size before decode (drop shape= / dtype=)")
    if isinstance(step, ColorJitter | SampleStep):
        return None
    return ("it runs on whole batches of images, and a patch batch holds patch rows; "
            "per-image steps (ColorJitter, datapipe.PerSample, SampleStep) run in the workers")


class PatchSteps:
    """Runs the steps on one image at a time, in a worker (or the loader's process)."""

    def __init__(self, steps: tuple[Transform, ...], seed: int) -> None:
        self.steps = steps
        self.generators = SampleGenerators(seed)
        self.names = [step_name(s) for s in steps]
        self.jitter_ranges = {k: factor_ranges(s) for k, s in enumerate(steps)
                              if isinstance(s, ColorJitter)}
        self.seconds = dict.fromkeys(self.names, 0.0)

    def __bool__(self) -> bool:
        return bool(self.steps)

    def run(self, pixels: np.ndarray, epoch: int, index: int) -> np.ndarray:
        """The steps in order on image `index`'s pixels; the result as contiguous uint8."""
        for position, step in enumerate(self.steps):
            started = time.perf_counter()
            try:
                result = self._apply(step, position, pixels, epoch, index)
            except Exception as exc:  # the user's code: any failure names the sample
                raise StepFailed(step, exc) from exc
            pixels = self._checked(position, result, pixels.shape)
            self.seconds[self.names[position]] += time.perf_counter() - started
        return np.ascontiguousarray(pixels)

    def _apply(self, step: Transform, position: int, pixels: np.ndarray, epoch: int,
               index: int) -> object:
        where = (epoch, index, STEPS_VIEW, position)
        if isinstance(step, PerSample):  # generators only for a function that takes one
            return step.apply_seeded(pixels, self.generators.seed_for(*where),
                                     functools.partial(self.generators.for_sample, *where))
        if isinstance(step, SampleStep):
            return step.apply_sample(pixels, self.generators.for_sample(*where))
        return jitter(pixels, self.jitter_ranges[position], self.generators.for_sample(*where))

    def _checked(self, position: int, result: object, shape: tuple[int, ...]) -> np.ndarray:
        if isinstance(result, np.ndarray) and result.shape == shape and \
                result.dtype == np.uint8:
            return result
        name, size = self.names[position], f"{shape[0]}x{shape[1]}"
        if not isinstance(result, np.ndarray):
            raise ArgumentError(f"{name} returned {type(result).__name__}, not an array of "
                                f"the image's {size}x3 uint8 pixels")
        raise ArgumentError(f"{name} returned {'x'.join(map(str, result.shape))} "
                            f"{result.dtype} pixels for an image of {size}x3 uint8: a step "
                            "must keep the image's size and dtype, since its patch grid was "
                            "planned from its stored size")

    def take_seconds(self) -> dict[str, float]:
        """Seconds per step (by name) since the last call."""
        seconds = dict(self.seconds)
        for name in self.seconds:
            self.seconds[name] = 0.0
        return seconds
