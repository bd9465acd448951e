"""Image transforms, composed with `|`.

Geometry (crop, resize, flip) is planned per sample from the stored height and width and done
during decode, so only what is needed is decoded. Photometric steps (colour jitter, normalise)
run once per batch on the target device.

Every argument is checked when the transform is made: a probability outside [0, 1], a zero std or
a crop size that is not a whole number is an `ArgumentError` there, not a worker's traceback at
the first batch nor batches of infinities.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from datapipe.errors import ArgumentError


class Transform:
    # What the loader does with a step: "geometry" and "flip" are planned into the decode,
    # "photometric" runs per batch, "sample" and "batch" steps (datapipe.image.steps) run
    # where their protocol says. A subclass with none is refused, never silently skipped.
    kind: ClassVar[str | None] = None

    def __or__(self, other: Transform) -> Pipeline:
        return Pipeline((*_steps(self), *_steps(other)))


def _steps(t: Transform) -> tuple[Transform, ...]:
    return t.steps if isinstance(t, Pipeline) else (t,)


def _is_real(value: Any) -> bool:
    """A finite real number: not a bool, a string, NaN or an infinity."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and \
        math.isfinite(value)


def _reals(value: Any, count: int) -> tuple[float, ...] | None:
    """`value` as `count` finite real numbers, or None when it is not that."""
    if isinstance(value, str | bytes):
        return None
    try:
        items = tuple(value)
    except TypeError:
        return None
    if len(items) != count or not all(_is_real(v) for v in items):
        return None
    return tuple(float(v) for v in items)


def _interval(value: Any, low: float, high: float) -> tuple[float, float] | None:
    """`value` as an ordered pair (lo, hi) with low < lo <= hi <= high, or None."""
    pair = _reals(value, 2)
    return pair if pair is not None and low < pair[0] <= pair[1] <= high else None


def _is_side(value: Any) -> bool:
    """A whole number of pixels, at least one (NumPy integers too; not a bool)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1


def _size_pair(size: int | tuple[int, int], what: str = "output size") -> tuple[int, int]:
    pair = (size, size) if _is_side(size) else size
    if isinstance(pair, tuple | list) and len(pair) == 2 and all(_is_side(v) for v in pair):
        return int(pair[0]), int(pair[1])
    raise ArgumentError(f"{what} must be a positive integer or a (height, width) pair of "
                        f"them, got {size!r}")


def _jitter_strength(name: str, value: Any) -> float | tuple[float, float]:
    """A ColorJitter strength: a number (hue: at most 0.5), or an explicit (lo, hi) range of
    factors (hue: of shifts, within [-0.5, 0.5])."""
    low, high = (-0.5, 0.5) if name == "hue" else (0.0, math.inf)
    if _is_real(value) and 0 <= value <= high:
        return float(value)
    pair = _reals(value, 2)
    if pair is not None and low <= pair[0] <= pair[1] <= high:
        return pair
    allowed = ("a number in [0, 0.5] or an ordered (lo, hi) pair within [-0.5, 0.5]"
               if name == "hue" else "a finite number >= 0 or an ordered (lo, hi) pair of them")
    raise ArgumentError(f"ColorJitter {name} must be {allowed}, got {value!r}")


@dataclass(frozen=True)
class RandomResizedCrop(Transform):
    """Crop a random area fraction `scale` and aspect `ratio` and resize to `size` (torchvision's
    algorithm: ten tries, then a centre crop)."""

    kind: ClassVar[str | None] = "geometry"
    size: int | tuple[int, int]
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)

    def __post_init__(self) -> None:
        _size_pair(self.size, "RandomResizedCrop size")
        scale, ratio = _interval(self.scale, 0, 1), _interval(self.ratio, 0, math.inf)
        if scale is None:
            raise ArgumentError(f"RandomResizedCrop scale must satisfy 0 < lo <= hi <= 1, got "
                                f"{self.scale!r}")
        if ratio is None:
            raise ArgumentError(f"RandomResizedCrop ratio must be positive and ordered, got "
                                f"{self.ratio!r}")
        object.__setattr__(self, "scale", scale)
        object.__setattr__(self, "ratio", ratio)


@dataclass(frozen=True)
class CenterCrop(Transform):
    """The centred region covering `fraction` of the shorter side, resized to `size` (the usual
    evaluation transform: fraction 0.875 is resize-256-then-crop-224)."""

    kind: ClassVar[str | None] = "geometry"
    size: int | tuple[int, int]
    fraction: float = 0.875

    def __post_init__(self) -> None:
        _size_pair(self.size, "CenterCrop size")
        if not (_is_real(self.fraction) and 0 < self.fraction <= 1):
            raise ArgumentError(f"CenterCrop fraction must be in (0, 1], got {self.fraction!r}")


@dataclass(frozen=True)
class HorizontalFlip(Transform):
    kind: ClassVar[str | None] = "flip"
    p: float = 0.5

    def __post_init__(self) -> None:
        if not (_is_real(self.p) and 0 <= self.p <= 1):
            raise ArgumentError(f"HorizontalFlip p must be a probability in [0, 1], got "
                                f"{self.p!r}")


@dataclass(frozen=True)
class ColorJitter(Transform):
    """Batched on the device (kornia); factors as in torchvision: a number s for brightness,
    contrast and saturation draws a factor from [max(0, 1 - s), 1 + s], one for hue a shift from
    [-s, s] (s <= 0.5); an explicit (lo, hi) range may be given instead."""

    kind: ClassVar[str | None] = "photometric"
    brightness: float | tuple[float, float] = 0.0
    contrast: float | tuple[float, float] = 0.0
    saturation: float | tuple[float, float] = 0.0
    hue: float | tuple[float, float] = 0.0

    def __post_init__(self) -> None:
        for name in ("brightness", "contrast", "saturation", "hue"):
            object.__setattr__(self, name, _jitter_strength(name, getattr(self, name)))


@dataclass(frozen=True)
class Normalize(Transform):
    """Scale to [0, 1], subtract mean, divide by std, cast to `dtype` ("float32", "float16",
    "bfloat16"): the batch is then ready for mixed precision."""

    kind: ClassVar[str | None] = "photometric"
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    dtype: str = "float32"

    def __post_init__(self) -> None:
        mean, std = _reals(self.mean, 3), _reals(self.std, 3)
        if mean is None:
            raise ArgumentError(f"Normalize mean must be 3 finite numbers (one per channel), "
                                f"got {self.mean!r}")
        if std is None or min(std) <= 0:
            raise ArgumentError(f"Normalize std must be 3 finite numbers above 0 (one per "
                                f"channel), got {self.std!r}")
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)
        if self.dtype not in ("float32", "float16", "bfloat16"):
            raise ArgumentError(f"Normalize dtype {self.dtype!r} is not float32/float16/bfloat16")


@dataclass(frozen=True)
class Pipeline(Transform):
    """Steps in the order written: one crop and one flip planned into the decode, the rest run
    in that order where each kind runs (see `datapipe.image.placement`)."""

    steps: tuple[Transform, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for step in self.steps:
            if step.kind is None:
                raise ArgumentError(
                    f"{type(step).__name__} is not a step the loader can run: subclass "
                    "datapipe.SampleStep (per sample, in the workers) or datapipe.BatchStep "
                    "(per batch, on its device), or wrap a function in datapipe.PerSample / "
                    "datapipe.PerBatch")
        geometry = [s for s in self.steps if s.kind == "geometry"]
        if len(geometry) > 1:
            raise ArgumentError("use one of RandomResizedCrop / CenterCrop per pipeline")
        normalize = next((i for i, s in enumerate(self.steps) if isinstance(s, Normalize)),
                         len(self.steps))
        for step in self.steps[normalize:]:
            if getattr(step, "needs_uint8", False):
                raise ArgumentError(f"{type(step).__name__} works on uint8 pixels: put it "
                                    "before Normalize")

    @property
    def crop(self) -> RandomResizedCrop | CenterCrop | None:
        return next((s for s in self.steps if isinstance(s, (RandomResizedCrop, CenterCrop))),
                    None)

    @property
    def flip(self) -> HorizontalFlip | None:
        return next((s for s in self.steps if isinstance(s, HorizontalFlip)), None)

    @property
    def pixel_steps(self) -> tuple[Transform, ...]:
        """Every step after the decode's geometry, in order: photometric, sample and batch."""
        return tuple(s for s in self.steps if s.kind not in ("geometry", "flip"))

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
    """Per sample: crop box (x0, y0, w, h) in stored pixels, and whether to flip. The sizes
    may be of any integer dtype (a stored column's own): areas are computed in int64."""
    heights, widths = np.asarray(heights, np.int64), np.asarray(widths, np.int64)
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
