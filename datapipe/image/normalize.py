"""`Normalize`'s arithmetic, in one place for both places it runs.

On the device it is a batch op (`BatchTransforms`). On the CPU path the decoder writes each
pixel through a 3 x 256 table instead (`normalize_table`): the table is this same arithmetic
applied to the 256 byte values of each channel, so a worker's output is identical to what the
batch op gives, bit for bit, and the process that hands batches to training does no pixel work.
"""

from __future__ import annotations

import numpy as np
import torch

from datapipe.image.transforms import Normalize

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# How a worker holds each dtype. NumPy has no bfloat16: its values travel as their bit patterns.
NUMPY_DTYPES = {"uint8": np.dtype(np.uint8), "float32": np.dtype(np.float32),
                "float16": np.dtype(np.float16), "bfloat16": np.dtype(np.uint16)}


def normalize_constants(step: Normalize,
                        device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std shaped to broadcast over N x 3 x H x W."""
    return (torch.tensor(step.mean, device=device).view(1, 3, 1, 1),
            torch.tensor(step.std, device=device).view(1, 3, 1, 1))


def scale_to_unit(images: torch.Tensor) -> torch.Tensor:
    """uint8 to float32 in [0, 1], in the input's memory format."""
    return images.float().div_(255.0)


def normalize_(x: torch.Tensor, step: Normalize, mean: torch.Tensor,
               std: torch.Tensor) -> torch.Tensor:
    """x: float32 in [0, 1], N x 3 x H x W (overwritten); returns it normalised, as step.dtype
    (round to nearest even, as every torch cast from float32 does)."""
    return x.sub_(mean).div_(std).to(TORCH_DTYPES[step.dtype])


def normalize_table(step: Normalize) -> np.ndarray:
    """table[c, v]: what byte v of channel c becomes, as `NUMPY_DTYPES[step.dtype]`."""
    levels = torch.arange(256, dtype=torch.uint8).view(1, 1, 1, 256).expand(1, 3, 1, 256)
    mean, std = normalize_constants(step, torch.device("cpu"))
    values = normalize_(scale_to_unit(levels), step, mean, std).reshape(3, 256)
    if values.dtype == torch.bfloat16:
        values = values.view(torch.int16)  # the bits; NumPy reads them as uint16 below
    return np.ascontiguousarray(values.numpy()).view(NUMPY_DTYPES[step.dtype])

