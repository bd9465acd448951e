"""An image (H, W, 3) cut into flat patches in the order, and with the layout, a model reads.

Two layouts, each the processor's own:
- "cthw" (Qwen2-VL): patches grouped merge_size x merge_size (a merged token's patches are
  consecutive), each patch flattened as (channel, temporal, row, column), the still image
  repeated over temporal_patch_size frames: `Qwen2VLImageProcessor.patchify`.
- "hwc" (SigLIP2 NaFlex, NaViT): patches row by row, each flattened as (row, column, channel):
  `convert_image_to_patches`.

One strided copy per image, straight into the batch buffer: no intermediate patch array.
"""

from __future__ import annotations

import numpy as np

PATCH_LAYOUTS = ("cthw", "hwc")


def patchify_into(image: np.ndarray, out: np.ndarray, patch_size: int, merge_size: int = 1,
                  temporal_patch_size: int = 1, layout: str = "hwc") -> None:
    """Write `image` (H, W, 3), H and W multiples of patch_size x merge_size, into `out`
    (patches, 3 x temporal x patch_size^2), the model's order."""
    h, w, c = image.shape
    p, m = patch_size, merge_size
    gh, gw = h // p, w // p
    if layout == "hwc":
        tiles = image.reshape(gh, p, gw, p, c).transpose(0, 2, 1, 3, 4)
        out.reshape(gh, gw, p, p, c)[...] = tiles
        return
    # (gh/m, m, p, gw/m, m, p, c) -> (gh/m, gw/m, m, m, c, p, p), each frame the same.
    tiles = image.reshape(gh // m, m, p, gw // m, m, p, c).transpose(0, 3, 1, 4, 6, 2, 5)
    t = temporal_patch_size
    out.reshape(gh // m, gw // m, m, m, c, t, p, p)[:, :, :, :, :, 0] = tiles
    # The other frames copied from the first in runs of p x p: a strided gather costs per
    # run of p floats, so it is done once.
    frames = out.reshape(-1, t, p * p)
    frames[:, 1:] = frames[:, :1]


def patch_coordinates(rows: int, cols: int, merge_size: int = 1) -> np.ndarray:
    """(row, column) of each patch in the grid, in the order `patchify_into` writes them
    (int64, (rows x cols, 2)): what a NaViT-style position embedding is indexed by."""
    m = merge_size
    r = np.arange(rows).reshape(rows // m, 1, m, 1)
    c = np.arange(cols).reshape(1, cols // m, 1, m)
    shape = (rows // m, cols // m, m, m)
    return np.stack([np.broadcast_to(r, shape).ravel(), np.broadcast_to(c, shape).ravel()],
                    axis=1).astype(np.int64)
