"""Each VLM sample's length as the model sees it: its text tokens, each image placeholder
replaced by the image's tokens (its patch grid at the preset's target size ÷ merge²).

Computed from the stored sizes alone (the preset's resize rule, vectorized over every image of
a shard at once; nothing decoded), so the planner packs by the real sequence length. A text
dataset without image columns (plain SFT, for a mixture) has its stored lengths.
"""

from __future__ import annotations

import numpy as np

from datapipe.format.dataset import Dataset
from datapipe.image.patch_geometry import GridGeometry

SIZES = "image_sizes"


def image_tokens(geometry: GridGeometry, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """Tokens each image stands for in the language model's sequence."""
    return geometry.patch_counts(heights, widths) // geometry.merge_size ** 2


def expanded_lengths(ds: Dataset, geometry: GridGeometry) -> np.ndarray:
    """Per sample (int64): stored length - its placeholders + its images' tokens."""
    lengths = np.asarray(ds.scalar_map("length"), dtype=np.int64)
    if SIZES not in ds.manifest.column_names:
        return lengths.copy()
    extra = np.empty(len(ds), np.int64)
    at = 0
    for k in range(ds.num_shards):
        for offsets, values in _size_views(ds, k):
            sizes = np.asarray(values, np.int64).reshape(-1, 2)
            tokens = image_tokens(geometry, sizes[:, 0], sizes[:, 1]) - 1 if len(sizes) else \
                np.zeros(0, np.int64)
            total = np.concatenate([[0], np.cumsum(tokens)])
            bounds = np.asarray(offsets, np.int64) // 2
            extra[at:at + len(bounds) - 1] = total[bounds[1:]] - total[bounds[:-1]]
            at += len(bounds) - 1
    return lengths + extra


def _size_views(ds: Dataset, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """A shard's image sizes as (offsets, values) per record batch; for a format without
    views, one (offsets, values) made from its rows."""
    reader = ds.shard(k)
    views = getattr(reader, "payload_views", None)
    if views is not None:
        return views(SIZES)
    cells = [np.asarray(reader.payload(SIZES, row)) for row in range(reader.num_rows)]
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in cells])])
    values = np.concatenate(cells) if cells else np.zeros(0, np.int32)
    return [(offsets, values)]
