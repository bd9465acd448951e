"""A built patch batch as the model takes it: tensors over the worker's buffer and metadata,
nothing computed per patch here (this runs on the training thread)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from datapipe.format.concat import SOURCE_FIELD
from datapipe.loader.patch_batches import PatchBatchSpec
from datapipe.loader.slots import slot_view

PACKED_KEYS = ("pixel_values", "cu_seqlens", "max_seqlen", "patch_positions")
PADDED_KEYS = ("pixel_values", "pixel_attention_mask", "patch_positions")
COMMON_KEYS = ("index", "label", "is_padding", "num_patches", "efficiency")


def batch_keys(layout: str, grid_field: str) -> tuple[str, ...]:
    return (PACKED_KEYS if layout == "packed" else PADDED_KEYS) + (grid_field,) + COMMON_KEYS


def grid_tensor(grids: np.ndarray, grid_field: str) -> torch.Tensor:
    """Each image's grid as its model names it: (n, 3) temporal, rows, columns for
    `image_grid_thw` (a still image is one frame), (n, 2) rows, columns for `spatial_shapes`."""
    if grid_field == "image_grid_thw":
        grids = np.concatenate([np.ones((len(grids), 1), np.int64), grids], axis=1)
    return torch.from_numpy(grids)


def collate_patches(spec: PatchBatchSpec, meta: dict[str, Any], slot: torch.Tensor,
                    grid_field: str, max_patches: int) -> dict[str, Any]:
    """The batch dict of a filled buffer (`slot`: its bytes) and its metadata. The buffer's
    regions are handed out as views of `slot` itself, so a copy to the GPU reads them in
    place (slots.slot_view)."""
    pixels, positions, mask = spec.regions(slot.numpy())
    count, real = meta["count"], meta["patches"]
    if spec.layout == "packed":
        batch: dict[str, Any] = {
            "pixel_values": slot_view(slot, pixels[:real]),
            "cu_seqlens": torch.from_numpy(meta["cu_seqlens"]),
            "max_seqlen": meta["max_seqlen"],
            "patch_positions": slot_view(slot, positions[:real])}
        computed = max_patches
    else:
        rows = spec.row_patches
        batch = {"pixel_values": slot_view(slot, pixels[:count * rows].reshape(count, rows, -1)),
                 "pixel_attention_mask": slot_view(slot, mask[:count * rows].reshape(count,
                                                                                    rows)),
                 "patch_positions": slot_view(slot, positions[:count * rows]
                                              .reshape(count, rows, 2))}
        computed = count * rows
    batch[grid_field] = grid_tensor(meta["grids"], grid_field)
    batch["index"] = torch.from_numpy(np.asarray(meta["index"], dtype=np.int64))
    batch["label"] = torch.from_numpy(np.asarray(meta["label"], dtype=np.int64))
    batch["is_padding"] = torch.from_numpy(np.asarray(meta["is_padding"], dtype=bool))
    if SOURCE_FIELD in meta:  # a mixture's: each image's dataset, beside its index there
        batch[SOURCE_FIELD] = torch.from_numpy(meta[SOURCE_FIELD])
    batch["num_patches"] = real
    batch["efficiency"] = real / computed if computed else 1.0
    return batch
