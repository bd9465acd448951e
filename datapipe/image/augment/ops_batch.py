"""The RandAugment family's ops over a batch: N x C x H x W float images in [0, 1].

One layer of a recipe gives each sample one op and one magnitude; `apply_layer` groups the
samples by op so that each op runs once per batch, on the samples that drew it, and all the
geometric ops of a layer share one warp. kornia does the ops it has (`kornia.enhance`,
`kornia.geometry.transform.warp_affine`); brightness and autocontrast are a few torch ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from datapipe.errors import ArgumentError
from datapipe.image.augment.geometry import GEOMETRIC_OPS, centre_forward, inverse_affine

BatchOp = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def kornia() -> Any:
    try:
        import kornia
    except ImportError:
        raise ArgumentError("the batched recipe ops need kornia: pip install kornia") from None
    return kornia


def _per_sample(values: torch.Tensor) -> torch.Tensor:
    return values.view(-1, 1, 1, 1)


def brightness(x: torch.Tensor, magnitudes: torch.Tensor) -> torch.Tensor:
    # torchvision's brightness scales (kornia's adjust_brightness adds)
    return (x * _per_sample(1 + magnitudes)).clamp_(0, 1)


def color(x: torch.Tensor, magnitudes: torch.Tensor) -> torch.Tensor:
    return kornia().enhance.adjust_saturation_with_gray_subtraction(x, 1 + magnitudes)


def contrast(x: torch.Tensor, magnitudes: torch.Tensor) -> torch.Tensor:
    return kornia().enhance.adjust_contrast_with_mean_subtraction(x, 1 + magnitudes)


def sharpness(x: torch.Tensor, magnitudes: torch.Tensor) -> torch.Tensor:
    return kornia().enhance.sharpness(x, 1 + magnitudes)


def posterize(x: torch.Tensor, magnitudes: torch.Tensor) -> torch.Tensor:
    return kornia().enhance.posterize(x, magnitudes.to(torch.int64))


def solarize(x: torch.Tensor, magnitudes: torch.Tensor) -> torch.Tensor:
    return kornia().enhance.solarize(x, magnitudes)


def autocontrast(x: torch.Tensor, magnitudes: torch.Tensor) -> torch.Tensor:
    low, high = x.amin(dim=(-2, -1), keepdim=True), x.amax(dim=(-2, -1), keepdim=True)
    flat = high == low  # a one-colour channel is left as it is
    scale = torch.where(flat, 1.0, 1.0 / torch.where(flat, 1.0, high - low))
    return ((x - torch.where(flat, 0.0, low)) * scale).clamp_(0, 1)


def equalize(x: torch.Tensor, magnitudes: torch.Tensor) -> torch.Tensor:
    return kornia().enhance.equalize(x)


def invert(x: torch.Tensor, magnitudes: torch.Tensor) -> torch.Tensor:
    return kornia().enhance.invert(x)


BATCH_OPS: dict[str, BatchOp] = {
    "Brightness": brightness,
    "Color": color,
    "Contrast": contrast,
    "Sharpness": sharpness,
    "Posterize": posterize,
    "Solarize": solarize,
    "AutoContrast": autocontrast,
    "Equalize": equalize,
    "Invert": invert,
}


def warp(x: torch.Tensor, ops: np.ndarray, magnitudes: np.ndarray,
         fill: torch.Tensor) -> torch.Tensor:
    """Each sample of x through its own geometric op, in one nearest-neighbour warp."""
    height, width = x.shape[-2:]
    inverse = np.stack([inverse_affine(op, m, height, width)
                        for op, m in zip(ops, magnitudes, strict=True)])
    forward = torch.from_numpy(centre_forward(inverse)).to(x.device, x.dtype)
    return kornia().geometry.transform.warp_affine(
        x, forward, (height, width), mode="nearest", padding_mode="fill", fill_value=fill)


def apply_layer(x: torch.Tensor, ops: np.ndarray, magnitudes: np.ndarray,
                fill: torch.Tensor) -> torch.Tensor:
    """x with sample i put through op ops[i] at magnitudes[i]; x is overwritten where changed."""
    geometric = np.flatnonzero(np.isin(ops, GEOMETRIC_OPS))
    if len(geometric):
        _put(x, geometric, warp(x[_index(geometric, x)], ops[geometric],
                                magnitudes[geometric], fill))
    for op in np.unique(ops):
        if op in BATCH_OPS:
            chosen = np.flatnonzero(ops == op)
            values = torch.from_numpy(magnitudes[chosen]).to(x.device, x.dtype)
            _put(x, chosen, BATCH_OPS[op](x[_index(chosen, x)], values))
    return x


def _index(rows: np.ndarray, x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(rows).to(x.device)


def _put(x: torch.Tensor, rows: np.ndarray, values: torch.Tensor) -> None:
    x.index_copy_(0, _index(rows, x), values.to(x.dtype))
