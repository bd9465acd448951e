"""How PatchLoader plans an epoch: TokenLoader's windowed planner with images for documents.

An image's length is its patch count at its target size, computed per window from the stored
sizes (memory-mapped scalar columns: no decode, nothing the size of the corpus). The packed
layout packs whole images best-fit-decreasing into rows of `max_patches` (the fixed layout's
packer, one row a batch: no image is ever split); the padded layout gives each image a row of
P patches and cuts batches of max_patches // P rows (the padded layout's planner). Windows,
round-robin ranks with equal steps, exact and elastic resume: sampling/token_windows.py. A
mixture's windows are TokenLoader's (sampling/mixture_tokens.py), images for documents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.image.patch_geometry import Geometry
from datapipe.loader.token_epochs import TokenEpochPlanner

# Images a window plans, and how many a packing window sorts at once: every window's last
# batch is part-filled, so a window is made of many batches (as TokenLoader's are).
WINDOW_BATCHES = 256
WINDOW_IMAGES = (1 << 12, 1 << 18)
_SAMPLE = 4096  # images whose mean patch count sizes the windows
_CHUNK = 1 << 20  # images whose sizes are read at once in a pass over them all


@dataclass(frozen=True, eq=False)
class PatchCounts:
    """Each image's patch count at its target size, looked up per window (`counts[ids]`)."""

    heights: np.ndarray
    widths: np.ndarray
    geometry: Geometry

    def __len__(self) -> int:
        return len(self.heights)

    def __getitem__(self, ids: np.ndarray) -> np.ndarray:
        return self.geometry.patch_counts(self.heights[ids], self.widths[ids])

    def mean(self) -> float:
        """Mean patch count over an even spread of up to 4096 images."""
        ids = np.unique(np.linspace(0, len(self) - 1, min(len(self), _SAMPLE)).astype(np.int64))
        return float(self[ids].mean()) if len(ids) else 1.0

    def total(self) -> int:
        """Patches of every image, summed a chunk of the memory-mapped sizes at a time."""
        return sum(int(self[np.arange(lo, min(lo + _CHUNK, len(self)))].sum(dtype=np.int64))
                   for lo in range(0, len(self), _CHUNK))


def first_too_large(counts: PatchCounts, budget: int) -> tuple[int, int] | None:
    """(image id, patches) of the first image with more patches than `budget`, or None; read
    in chunks of the memory-mapped sizes (only when the geometry's bound says one may be)."""
    for lo in range(0, len(counts), _CHUNK):
        chunk = counts[np.arange(lo, min(lo + _CHUNK, len(counts)))]
        over = np.flatnonzero(chunk > budget)
        if len(over):
            return lo + int(over[0]), int(chunk[over[0]])
    return None


def check_fits(counts: PatchCounts, max_patches: int, name: str) -> None:
    """Every image fits one batch: refused at construction, naming the image and both
    numbers (a user who prefers it passes oversize="downscale")."""
    if counts.geometry.max_patches_per_image <= max_patches:
        return
    found = first_too_large(counts, max_patches)
    if found is not None:
        image, patches = found
        raise ArgumentError(f"{name}: image {image} has {patches} patches, more than "
                            f"max_patches={max_patches}; raise max_patches, lower max_pixels, "
                            "or pass oversize='downscale' (such images are resized to fit)")


def window_images(asked: int | None, budget: int, counts: PatchCounts) -> int:
    """Images per planning window: `asked`, or about WINDOW_BATCHES batches' worth."""
    if asked is not None:
        return asked
    per_batch = budget / max(1.0, counts.mean())
    return int(np.clip(WINDOW_BATCHES * per_batch, *WINDOW_IMAGES))


def patch_planner(layout: str, counts: PatchCounts, max_patches: int, row_patches: int,
                  plan_window: int, pack_window: int, shuffle: bool, seed: int,
                  mixing: Any = None) -> TokenEpochPlanner:
    """The windowed token planner set for patch batches (see the module's docstring);
    `mixing`: a mixture's TokenMixing, whose windows of images it packs."""
    if layout == "packed":
        return TokenEpochPlanner("fixed", None, None, max_patches, 1, 1, 1, 1, pack_window,
                                 plan_window, shuffle, seed, None, counts, mixing)
    rows = max_patches // row_patches
    if rows < 1:
        raise ArgumentError(f"max_patches={max_patches} holds no image of {row_patches} "
                            "patches (the padded layout's row)")
    return TokenEpochPlanner("padded", rows * row_patches, rows, 0, rows, row_patches, 1, 64,
                             pack_window, plan_window, shuffle, seed, None, counts, mixing)
