"""Where a native-resolution model wants each image: its target size and patch grid, computed
from the stored size alone (no decode), for a whole window of images at once.

Two rules, each the vectorized twin of its transformers function, so the grids are the
processor's own:

- `GridGeometry`: Qwen2-VL's `smart_resize` (sides multiples of patch_size x merge_size,
  area between min_pixels and max_pixels, aspect kept); with merge_size 1 it is NaViT's rule.
- `NaFlexGeometry`: SigLIP2's `get_image_size_for_max_num_patches` (the largest scale whose
  ceil-rounded grid holds at most max_num_patches), the same bisection run on arrays.

An image the processors refuse or cannot place is still placed within the limits (never an
exception mid-epoch): Qwen2-VL's processor raises for an aspect ratio beyond 200:1; here its
short side is kept at one unit (patch_size x merge_size) and its long side cut so the area
stays within max_pixels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from datapipe.errors import ArgumentError


def _ints(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


@dataclass(frozen=True)
class GridGeometry:
    """Qwen2-VL's resize rule (merge_size 2, temporal_patch_size 2) or NaViT's (both 1)."""

    patch_size: int = 14
    merge_size: int = 2
    temporal_patch_size: int = 2
    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280

    def __post_init__(self) -> None:
        for name in ("patch_size", "merge_size", "temporal_patch_size", "min_pixels",
                     "max_pixels"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ArgumentError(f"{name} must be a whole number >= 1, got {value!r}")
        if self.max_pixels < self.unit ** 2:
            raise ArgumentError(f"max_pixels={self.max_pixels} is less than one "
                                f"{self.unit}x{self.unit} unit of patches (patch_size x "
                                "merge_size squared)")
        if self.min_pixels > self.max_pixels:
            raise ArgumentError(f"min_pixels={self.min_pixels} is more than "
                                f"max_pixels={self.max_pixels}")

    @property
    def unit(self) -> int:
        """Both sides are multiples of this (the processor's `factor`)."""
        return self.patch_size * self.merge_size

    @property
    def max_patches_per_image(self) -> int:
        return self.max_pixels // self.patch_size ** 2

    def target_sizes(self, heights: np.ndarray,
                     widths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(height, width) each image is resized to: `smart_resize`, elementwise."""
        h, w = _ints(heights).astype(np.float64), _ints(widths).astype(np.float64)
        f = self.unit
        h_bar, w_bar = np.round(h / f) * f, np.round(w / f) * f  # round half to even, as round()
        over = h_bar * w_bar > self.max_pixels
        under = ~over & (h_bar * w_bar < self.min_pixels)
        with np.errstate(divide="ignore", invalid="ignore"):
            beta = np.sqrt(h * w / self.max_pixels)
            h_bar = np.where(over, np.maximum(f, np.floor(h / beta / f) * f), h_bar)
            w_bar = np.where(over, np.maximum(f, np.floor(w / beta / f) * f), w_bar)
            beta = np.sqrt(self.min_pixels / (h * w))
            h_bar = np.where(under, np.ceil(h * beta / f) * f, h_bar)
            w_bar = np.where(under, np.ceil(w * beta / f) * f, w_bar)
        return self._within_limits(_ints(h_bar), _ints(w_bar))

    def _within_limits(self, h: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sides of at least one unit, area at most max_pixels: only aspect ratios beyond the
        processor's 200:1 need it, their long side then cut to fit."""
        f = self.unit
        h, w = np.maximum(h, f), np.maximum(w, f)
        tall = h >= w
        short, long = np.where(tall, w, h), np.where(tall, h, w)
        long = np.minimum(long, np.maximum(1, self.max_pixels // f // short) * f)
        return np.where(tall, long, short), np.where(tall, short, long)

    def grids(self, heights: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, columns) of patches of each image, at its target size."""
        h, w = self.target_sizes(heights, widths)
        return h // self.patch_size, w // self.patch_size

    def patch_counts(self, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
        rows, cols = self.grids(heights, widths)
        return rows * cols

    @property
    def patch_dim(self) -> int:
        return 3 * self.temporal_patch_size * self.patch_size ** 2


@dataclass(frozen=True)
class NaFlexGeometry:
    """SigLIP2's NaFlex rule: at most `max_num_patches` patches of `patch_size`, aspect kept."""

    patch_size: int = 16
    max_num_patches: int = 256
    eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("patch_size", "max_num_patches"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ArgumentError(f"{name} must be a whole number >= 1, got {value!r}")

    merge_size = 1
    temporal_patch_size = 1

    @property
    def max_patches_per_image(self) -> int:
        return self.max_num_patches

    def _scaled(self, scale: np.ndarray, size: np.ndarray) -> np.ndarray:
        p = self.patch_size
        return np.maximum(p, np.ceil(size * scale / p) * p)

    def target_sizes(self, heights: np.ndarray,
                     widths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`get_image_size_for_max_num_patches`, elementwise: the same bisection in the same
        float64 arithmetic, each image's interval halved until it is narrower than eps."""
        h, w = _ints(heights).astype(np.float64), _ints(widths).astype(np.float64)
        lo, hi = np.full(h.shape, self.eps / 10), np.full(h.shape, 100.0)
        p = self.patch_size
        active = (hi - lo) >= self.eps
        while active.any():
            scale = (lo + hi) / 2
            patches = (self._scaled(scale, h) / p) * (self._scaled(scale, w) / p)
            fits = patches <= self.max_num_patches
            lo = np.where(active & fits, scale, lo)
            hi = np.where(active & ~fits, scale, hi)
            active = (hi - lo) >= self.eps
        return _ints(self._scaled(lo, h)), _ints(self._scaled(lo, w))

    def grids(self, heights: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h, w = self.target_sizes(heights, widths)
        return h // self.patch_size, w // self.patch_size

    def patch_counts(self, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
        rows, cols = self.grids(heights, widths)
        return rows * cols

    @property
    def patch_dim(self) -> int:
        return 3 * self.patch_size ** 2


Geometry = GridGeometry | NaFlexGeometry


class TargetMemo:
    """A worker's target sizes, remembered by stored size: NaFlex's bisection is ~25 rounds of
    NumPy a batch, and stored sizes repeat (a camera's few; every image of an earlier epoch).
    Holds at most `limit` sizes, forgetting them all when full."""

    def __init__(self, geometry: Geometry, limit: int = 1 << 16) -> None:
        self.geometry = geometry
        self.limit = limit
        self.known: dict[tuple[int, int], tuple[int, int]] = {}

    def target_sizes(self, heights: np.ndarray,
                     widths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As `geometry.target_sizes`."""
        stored = list(zip(_ints(heights).tolist(), _ints(widths).tolist(), strict=True))
        found = [self.known.get(size) for size in stored]
        missing = [i for i, target in enumerate(found) if target is None]
        if missing:
            if len(self.known) + len(missing) > self.limit:
                self.known.clear()
            th, tw = self.geometry.target_sizes(_ints(heights)[missing], _ints(widths)[missing])
            for i, h, w in zip(missing, th.tolist(), tw.tolist(), strict=True):
                found[i] = self.known[stored[i]] = (h, w)
        sizes = np.array(found, dtype=np.int64).reshape(-1, 2)
        return sizes[:, 0], sizes[:, 1]
