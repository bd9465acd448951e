"""Image transforms, composed with `|`.

Geometry (crop, resize, flip) is planned per sample from the stored height and width and done
during decode, so only what is needed is decoded. Photometric steps (colour jitter, normalise)
run once per batch on the target device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from datapipe.errors import ArgumentError


class Transform:
    def __or__(self, other: Transform) -> Pipeline:
        return Pipeline((*_steps(self), *_steps(other)))


def _steps(t: Transform) -> tuple[Transform, ...]:
    return t.steps if isinstance(t, Pipeline) else (t,)


def _size_pair(size: int | tuple[int, int]) -> tuple[int, int]:
    h, w = (size, size) if isinstance(size, int) else size
    if h < 1 or w < 1:
        raise ArgumentError(f"output size must be positive, got {size}")
    return int(h), int(w)


@dataclass(frozen=True)
class RandomResizedCrop(Transform):
    """Crop a random area fraction `scale` and aspect `ratio` and resize to `size` (torchvision's
    algorithm: ten tries, then a centre crop)."""

    size: int | tuple[int, int]
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)

    def __post_init__(self) -> None:
        _size_pair(self.size)
        if not 0 < self.scale[0] <= self.scale[1] <= 1:
            raise ArgumentError(f"RandomResizedCrop scale must satisfy 0 < lo <= hi <= 1, got "
                                f"{self.scale}")
        if not 0 < self.ratio[0] <= self.ratio[1]:
            raise ArgumentError(f"RandomResizedCrop ratio must be positive and ordered, got "
                                f"{self.ratio}")


@dataclass(frozen=True)
class CenterCrop(Transform):
    """The centred region covering `fraction` of the shorter side, resized to `size` (the usual
    evaluation transform: fraction 0.875 is resize-256-then-crop-224)."""

    size: int | tuple[int, int]
    fraction: float = 0.875

    def __post_init__(self) -> None:
        _size_pair(self.size)
        if not 0 < self.fraction <= 1:
            raise ArgumentError(f"CenterCrop fraction must be in (0, 1], got {self.fraction}")


@dataclass(frozen=True)
class HorizontalFlip(Transform):
    p: float = 0.5


@dataclass(frozen=True)
class ColorJitter(Transform):
    """Batched on the device (kornia); factors as in torchvision."""

    brightness: float = 0.0
    contrast: float = 0.0
    saturation: float = 0.0
    hue: float = 0.0


@dataclass(frozen=True)
class Normalize(Transform):
    """Scale to [0, 1], subtract mean, divide by std, cast to `dtype` ("float32", "float16",
    "bfloat16"): the batch is then ready for mixed precision."""

    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.dtype not in ("float32", "float16", "bfloat16"):
            raise ArgumentError(f"Normalize dtype {self.dtype!r} is not float32/float16/bfloat16")


@dataclass(frozen=True)
class Pipeline(Transform):
    steps: tuple[Transform, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        geometry = [s for s in self.steps if isinstance(s, (RandomResizedCrop, CenterCrop))]
        if len(geometry) > 1:
            raise ArgumentError("use one of RandomResizedCrop / CenterCrop per pipeline")

    @property
    def crop(self) -> RandomResizedCrop | CenterCrop | None:
        return next((s for s in self.steps if isinstance(s, (RandomResizedCrop, CenterCrop))),
                    None)

    @property
    def flip(self) -> HorizontalFlip | None:
        return next((s for s in self.steps if isinstance(s, HorizontalFlip)), None)

    @property
    def batch_steps(self) -> tuple[Transform, ...]:
        return tuple(s for s in self.steps if isinstance(s, (ColorJitter, Normalize)))

    @property
    def output_size(self) -> tuple[int, int] | None:
        return _size_pair(self.crop.size) if self.crop else None


def as_pipeline(transform: Transform | None) -> Pipeline:
    if transform is None:
        return Pipeline(())
    if not isinstance(transform, Transform):
        raise ArgumentError(f"transform must be built from datapipe.image transforms, got "
                            f"{type(transform).__name__}")
    return Pipeline(_steps(transform))


def plan_crops(pipeline: Pipeline, heights: np.ndarray, widths: np.ndarray,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Per sample: crop box (x0, y0, w, h) in stored pixels, and whether to flip."""
    crop, n = pipeline.crop, len(heights)
    if isinstance(crop, RandomResizedCrop):
        boxes = _random_resized_boxes(crop, heights, widths, rng)
    elif isinstance(crop, CenterCrop):
        boxes = _center_boxes(crop, heights, widths)
    else:
        boxes = np.stack([np.zeros(n), np.zeros(n), widths, heights], axis=1)
    flip = pipeline.flip
    flips = rng.random(n) < flip.p if flip else np.zeros(n, dtype=bool)
    return boxes.astype(np.int64), flips


def _random_resized_boxes(crop: RandomResizedCrop, heights: np.ndarray, widths: np.ndarray,
                          rng: np.random.Generator, tries: int = 10) -> np.ndarray:
    n = len(heights)
    area = (heights * widths).astype(np.float64)[:, None]
    target = area * rng.uniform(crop.scale[0], crop.scale[1], size=(n, tries))
    log_ratio = rng.uniform(math.log(crop.ratio[0]), math.log(crop.ratio[1]), size=(n, tries))
    aspect = np.exp(log_ratio)
    w = np.rint(np.sqrt(target * aspect))
    h = np.rint(np.sqrt(target / aspect))
    fits = (w > 0) & (h > 0) & (w <= widths[:, None]) & (h <= heights[:, None])
    first = np.argmax(fits, axis=1)
    rows = np.arange(n)
    cw, ch = w[rows, first], h[rows, first]
    x0 = np.floor(rng.random(n) * (widths - cw + 1))
    y0 = np.floor(rng.random(n) * (heights - ch + 1))
    boxes = np.stack([x0, y0, cw, ch], axis=1)
    fallback = ~fits.any(axis=1)
    if fallback.any():
        boxes[fallback] = _ratio_center_boxes(crop.ratio, heights[fallback], widths[fallback])
    return boxes


def _ratio_center_boxes(ratio: tuple[float, float], heights: np.ndarray,
                        widths: np.ndarray) -> np.ndarray:
    in_ratio = widths / heights
    w = np.where(in_ratio < ratio[0], widths, np.where(in_ratio > ratio[1],
                 np.rint(heights * ratio[1]), widths))
    h = np.where(in_ratio < ratio[0], np.rint(widths / ratio[0]), heights)
    return np.stack([(widths - w) // 2, (heights - h) // 2, w, h], axis=1)


def _center_boxes(crop: CenterCrop, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
    out_h, out_w = _size_pair(crop.size)
    side = np.minimum(heights, widths) * crop.fraction
    # The box has the output's aspect ratio and fits inside the image.
    scale = np.minimum(side / min(out_h, out_w), np.minimum(widths / out_w, heights / out_h))
    w, h = np.maximum(1, np.rint(out_w * scale)), np.maximum(1, np.rint(out_h * scale))
    return np.stack([(widths - w) // 2, (heights - h) // 2, w, h], axis=1)
