"""The RandAugment family's ops on one sample: HWC uint8 RGB numpy in, the same out.

Each op is C work, never a Python loop over pixels: Pillow on a zero-copy view of the pixels
for warps, filters and blends, and for the ops that map each byte value to another (brightness,
contrast, posterize, solarize, autocontrast, equalize, invert) a 3 x 256 table applied by
Pillow's `point`. The arithmetic is torchvision's on uint8 tensors (products truncated to a
byte), so the results match its ops up to a byte's rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from PIL import Image, ImageFilter

from datapipe.image.augment.geometry import GEOMETRIC_OPS, inverse_affine

Fill = tuple[int, int, int]
SampleOp = Callable[[np.ndarray, float, Fill], np.ndarray]
_LEVELS = np.arange(256, dtype=np.float32)
_GREY = np.array([0.2989, 0.587, 0.114])  # torchvision's weights of (r, g, b) in grey


def _image(pixels: np.ndarray) -> Image.Image:
    pixels = np.ascontiguousarray(pixels)
    height, width = pixels.shape[:2]
    return Image.frombuffer("RGB", (width, height), pixels, "raw", "RGB", 0, 1)


def _lookup(pixels: np.ndarray, tables: np.ndarray) -> np.ndarray:
    """Each channel's bytes through its own 256-entry table (3 x 256, or 256 for all three)."""
    tables = np.broadcast_to(tables, (3, 256)).astype(np.uint8)
    return np.asarray(_image(pixels).point(tables.ravel().tolist()))


def _blend_table(factor: float, other: np.ndarray | float) -> np.ndarray:
    """What torchvision's uint8 blend gives each byte: factor * v + (1 - factor) * other,
    clamped, truncated to a byte."""
    factor = np.float32(factor)
    return np.clip(_LEVELS * factor + np.float32(1 - factor) * np.float32(other), 0, 255)


def _histograms(pixels: np.ndarray) -> np.ndarray:
    return np.asarray(_image(pixels).histogram(), dtype=np.int64).reshape(3, 256)


def warp(op: str) -> SampleOp:
    def apply(pixels: np.ndarray, magnitude: float, fill: Fill) -> np.ndarray:
        height, width = pixels.shape[:2]
        matrix = inverse_affine(op, magnitude, height, width)
        out = _image(pixels).transform((width, height), Image.Transform.AFFINE,
                                       tuple(matrix.ravel()), Image.Resampling.NEAREST,
                                       fillcolor=fill)
        return np.asarray(out)
    return apply


def identity(pixels: np.ndarray, magnitude: float, fill: Fill) -> np.ndarray:
    return pixels


def brightness(pixels: np.ndarray, magnitude: float, fill: Fill) -> np.ndarray:
    return _lookup(pixels, _blend_table(1 + magnitude, 0.0))


def color(pixels: np.ndarray, magnitude: float, fill: Fill) -> np.ndarray:
    # The blend with the pixel's grey is linear in (r, g, b): one pass of a 3 x 3 colour matrix.
    factor = 1 + magnitude
    matrix = (1 - factor) * np.tile(_GREY, (3, 1)) + factor * np.eye(3)
    rows = np.concatenate([matrix, np.zeros((3, 1))], axis=1)
    return np.asarray(_image(pixels).convert("RGB", tuple(rows.ravel())))


def contrast(pixels: np.ndarray, magnitude: float, fill: Fill) -> np.ndarray:
    # The blend is with one number, the grey image's mean: a table per byte value.
    counts = _histograms(pixels)
    channel_means = counts @ _LEVELS / counts[0].sum()
    grey_mean = float(channel_means @ _GREY)
    return _lookup(pixels, _blend_table(1 + magnitude, grey_mean))


def sharpness(pixels: np.ndarray, magnitude: float, fill: Fill) -> np.ndarray:
    # The blend with the 3 x 3 smoothed image (1 1 1 / 1 5 1 / 1 1 1, over 13) is itself one
    # 3 x 3 kernel; Pillow leaves the border pixels as they are, as torchvision does.
    factor = 1 + magnitude
    kernel = np.full(9, (1 - factor) / 13)
    kernel[4] = factor + (1 - factor) * 5 / 13
    return np.asarray(_image(pixels).filter(ImageFilter.Kernel((3, 3), kernel.tolist(), scale=1)))


def posterize(pixels: np.ndarray, magnitude: float, fill: Fill) -> np.ndarray:
    bits = int(magnitude)
    mask = (0xFF << (8 - bits)) & 0xFF
    return _lookup(pixels, np.arange(256) & mask)


def solarize(pixels: np.ndarray, magnitude: float, fill: Fill) -> np.ndarray:
    # torchvision's threshold for uint8 is a fraction of 255; bytes at or above it are inverted
    levels = np.arange(256)
    return _lookup(pixels, np.where(levels >= 255.0 * magnitude, 255 - levels, levels))


def autocontrast(pixels: np.ndarray, magnitude: float, fill: Fill) -> np.ndarray:
    counts = _histograms(pixels)
    present = counts > 0
    low = present.argmax(axis=1).astype(np.float32)[:, None]
    high = (255 - present[:, ::-1].argmax(axis=1)).astype(np.float32)[:, None]
    flat = high == low  # a one-colour channel is left as it is
    scale = np.where(flat, 1, 255 / np.where(flat, 1, high - low))
    return _lookup(pixels, np.clip((_LEVELS - np.where(flat, 0, low)) * scale, 0, 255))


def equalize(pixels: np.ndarray, magnitude: float, fill: Fill) -> np.ndarray:
    counts = _histograms(pixels)
    return _lookup(pixels, np.stack([_equalize_table(c) for c in counts]))


def _equalize_table(counts: np.ndarray) -> np.ndarray:
    """Pillow's and torchvision's equalisation of one channel (its last level not counted)."""
    last = np.flatnonzero(counts)[-1]
    step = (counts.sum() - counts[last]) // 255
    if step == 0:
        return np.arange(256)
    before = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return np.minimum((before + step // 2) // step, 255)


def invert(pixels: np.ndarray, magnitude: float, fill: Fill) -> np.ndarray:
    return _lookup(pixels, 255 - np.arange(256))


SAMPLE_OPS: dict[str, SampleOp] = {
    "Identity": identity,
    **{op: warp(op) for op in GEOMETRIC_OPS},
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
