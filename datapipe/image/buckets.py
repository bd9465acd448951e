"""Aspect-ratio buckets (SDXL, kohya sd-scripts): which output size each image is trained at.

A bucket set is a list of (height, width) sizes, multiples of a step (64 px), of about the same
area. Each image goes to the bucket whose aspect ratio is nearest its own in log space, from
its stored size alone (no decode); each batch holds one bucket's images, each resized to cover
the bucket and cropped to it. The crop is planned here, per sample, in stored pixels, so the
decoder reads only the crop's region (at a reduced DCT scale where it can), and SDXL's size
conditioning (`original_size`, `crop_top_left`, `target_size`) comes with it.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.errors import ArgumentError

CROPS = ("random", "center")
# Log-ratio distances closer than this are a tie: equal ratios computed two ways differ in the
# last bits, and a tie goes to the larger area, then the first bucket, whatever the rounding.
_TIE = 1e-9


def _whole(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(frozen=True)
class Buckets:
    """Output sizes by aspect ratio, for `Loader(..., buckets=...)`.

    `sizes`: (height, width) pairs, each side a positive multiple of `step`. `crop`: "random"
    or "center", where the cover-resized image is cut to its bucket. `max_pixels`: a pixel
    budget per batch instead of the loader's batch_size, B = max(1, max_pixels // (H * W))
    images in a bucket of H x W. `max_aspect_error`: the largest |log(image ratio / bucket
    ratio)| a bucket holds without comment; an image further from every bucket still goes to
    the nearest (its crop cuts more), and the loader counts them and warns once.
    """

    sizes: tuple[tuple[int, int], ...]
    step: int = 64
    crop: str = "random"
    max_pixels: int | None = None
    max_aspect_error: float = 0.2

    def __post_init__(self) -> None:
        if not _whole(self.step) or self.step < 1:
            raise ArgumentError(f"Buckets step must be a positive integer, got {self.step!r}")
        object.__setattr__(self, "sizes", _checked_sizes(self.sizes, self.step))
        if self.crop not in CROPS:
            raise ArgumentError(f"Buckets crop must be one of {CROPS}, got {self.crop!r}")
        if self.max_pixels is not None and not (_whole(self.max_pixels) and self.max_pixels >= 1):
            raise ArgumentError(f"Buckets max_pixels must be a positive integer, got "
                                f"{self.max_pixels!r}")
        error = self.max_aspect_error
        if not (isinstance(error, numbers.Real) and not isinstance(error, bool)
                and math.isfinite(error) and error > 0):
            raise ArgumentError(f"Buckets max_aspect_error must be a finite number above 0 (a "
                                f"log-ratio), got {error!r}")

    @classmethod
    def of(cls, sizes: Iterable[tuple[int, int]], step: int = 64, **options: Any) -> Buckets:
        """Buckets of the given (height, width) sizes."""
        if isinstance(sizes, str | bytes) or not isinstance(sizes, Iterable):
            raise ArgumentError(f"Buckets sizes must be a list of (height, width) pairs, got "
                                f"{sizes!r}")
        return cls(tuple(sizes), step, **options)

    @classmethod
    def kohya(cls, area: int = 1024 ** 2, step: int = 64, min_side: int = 512,
              max_side: int = 2048, **options: Any) -> Buckets:
        """kohya sd-scripts' `make_bucket_resolutions`: the square nearest `area`, and for each
        width from min_side to max_side in steps, the largest height (a multiple of step, at
        most max_side) with width x height <= area, both orientations, without repeats."""
        for name, value in (("area", area), ("step", step), ("min_side", min_side),
                            ("max_side", max_side)):
            if not _whole(value) or value < 1:
                raise ArgumentError(f"Buckets.kohya {name} must be a positive integer, got "
                                    f"{value!r}")
        if min_side > max_side:
            raise ArgumentError(f"Buckets.kohya min_side {min_side} is above max_side "
                                f"{max_side}")
        side = math.isqrt(area) // step * step
        found = {(side, side)} if side else set()
        for width in range(min_side, max_side + 1, step):
            height = min(max_side, area // width // step * step)
            if height >= min_side:
                found.update({(height, width), (width, height)})
        if not found:
            raise ArgumentError(f"Buckets.kohya: no size of area <= {area} has both sides in "
                                f"[{min_side}, {max_side}] in steps of {step}")
        return cls(tuple(sorted(found, key=lambda hw: (hw[1], hw[0]))), step, **options)

    def batch_sizes(self, batch_size: int) -> tuple[int, ...]:
        """Images per batch of each bucket: `batch_size`, or what `max_pixels` allows."""
        if self.max_pixels is None:
            return (batch_size,) * len(self.sizes)
        return tuple(max(1, self.max_pixels // (h * w)) for h, w in self.sizes)

    def identity(self) -> dict[str, Any]:
        """What a saved state must agree on (JSON-able)."""
        return {"sizes": [list(s) for s in self.sizes], "crop": self.crop,
                "max_pixels": self.max_pixels}

    def digest(self) -> str:
        """16 hex digits naming the assignment: the sizes and the aspect limit."""
        text = json.dumps([[list(s) for s in self.sizes], self.max_aspect_error])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def assign(self, heights: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(bucket of each image, int64; its |log-ratio| distance to that bucket)."""
        sizes = np.asarray(self.sizes, dtype=np.float64)
        # Candidates tried largest area first, then in the given order: argmin keeps the first.
        order = np.lexsort((np.arange(len(sizes)), -sizes[:, 0] * sizes[:, 1]))
        ratios = np.log(sizes[order, 0] / sizes[order, 1])
        image = np.log(np.asarray(heights, np.float64) / np.asarray(widths, np.float64))
        distance = np.abs(image[:, None] - ratios[None, :])
        best = np.argmin(np.round(distance / _TIE), axis=1)
        return order[best].astype(np.int64), distance[np.arange(len(best)), best]


def _checked_sizes(sizes: Any, step: int) -> tuple[tuple[int, int], ...]:
    if isinstance(sizes, str | bytes) or not isinstance(sizes, Iterable):
        raise ArgumentError(f"Buckets sizes must be a list of (height, width) pairs, got "
                            f"{sizes!r}")
    pairs = tuple(sizes)
    if not pairs:
        raise ArgumentError("Buckets sizes is empty: give at least one (height, width)")
    checked = []
    for pair in pairs:
        if not (isinstance(pair, tuple | list) and len(pair) == 2 and all(map(_whole, pair))):
            raise ArgumentError(f"Buckets sizes: {pair!r} is not a (height, width) pair of "
                                "integers")
        h, w = int(pair[0]), int(pair[1])
        if h < 1 or w < 1:
            raise ArgumentError(f"Buckets sizes: {pair!r} has a side below 1")
        if h % step or w % step:
            raise ArgumentError(f"Buckets sizes: {pair!r} has a side that is not a multiple of "
                                f"step={step}")
        if (h, w) in checked:
            raise ArgumentError(f"Buckets sizes: {pair!r} is given twice")
        checked.append((h, w))
    return tuple(checked)


def plan_cover_crops(size: tuple[int, int], heights: np.ndarray, widths: np.ndarray,
                     crop: str, flips: np.ndarray,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Per image: its crop box (x0, y0, w, h) in stored pixels, and `crop_top_left` (top,
    left) in the image resized to cover the bucket, as SDXL conditions on it.

    The image is scaled by s = max(H / h, W / w) (it covers the bucket, one side exact) to
    round(h * s) x round(w * s), and the bucket's H x W cut from it: a box of W / s x H / s
    stored pixels, placed at random or centred. A flipped image's left is counted from the
    flipped image's edge: resized width - left - W, as SDXL trainers record it.
    """
    out_h, out_w = size
    h, w = np.asarray(heights, np.int64), np.asarray(widths, np.int64)
    scale = np.maximum(out_h / h, out_w / w)
    box_w = np.clip(np.rint(out_w / scale), 1, w).astype(np.int64)
    box_h = np.clip(np.rint(out_h / scale), 1, h).astype(np.int64)
    if crop == "random":
        x0 = np.floor(rng.random(len(h)) * (w - box_w + 1)).astype(np.int64)
        y0 = np.floor(rng.random(len(h)) * (h - box_h + 1)).astype(np.int64)
    else:
        x0, y0 = (w - box_w) // 2, (h - box_h) // 2
    resized_w = np.maximum(out_w, np.rint(w * scale)).astype(np.int64)
    resized_h = np.maximum(out_h, np.rint(h * scale)).astype(np.int64)
    top = np.clip(np.rint(y0 * scale).astype(np.int64), 0, resized_h - out_h)
    left = np.clip(np.rint(x0 * scale).astype(np.int64), 0, resized_w - out_w)
    left = np.where(flips, resized_w - left - out_w, left)
    return np.stack([x0, y0, box_w, box_h], axis=1), np.stack([top, left], axis=1)
