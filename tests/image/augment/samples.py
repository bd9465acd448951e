"""Test images for the augmentation steps."""

from __future__ import annotations

import numpy as np
import torch


def photo(height: int = 48, width: int = 64, seed: int = 0) -> np.ndarray:
    """H x W x 3 uint8 with gradients, edges and noise: every op changes it visibly, and no
    channel is one colour."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    channels = [(3 * x + 2 * y) % 200 + 20, (x * y) % 256, np.where(x > width // 3, 180, 40) + y]
    noisy = np.stack(channels, axis=-1) + rng.integers(-12, 13, (height, width, 3))
    return np.clip(noisy, 0, 255).astype(np.uint8)


def as_batch(*images: np.ndarray) -> torch.Tensor:
    """N x 3 x H x W float32 in [0, 1], as the loader hands a batch to batch steps."""
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float().div(255)


def as_bytes(batch: torch.Tensor) -> np.ndarray:
    """Back to N x H x W x 3, in byte units (not rounded)."""
    return batch.permute(0, 2, 3, 1).mul(255).numpy().astype(np.float64)
