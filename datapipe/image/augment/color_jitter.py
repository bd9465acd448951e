"""`ColorJitter` on one image, in the workers: HWC uint8 RGB in, the same out.

torchvision's ColorJitter: the four adjustments in a random order, each factor drawn uniformly
from its range (a strength s gives [max(0, 1 - s), 1 + s], hue [-s, s]; an adjustment whose
range is the identity is skipped). Each adjustment is one pass of the C extension (colour.c:
torchvision's arithmetic for uint8 tensors, hue through float HSV). Without it: the RandAugment
family's ops for brightness, contrast and saturation (ops_sample.py, in Pillow) and
torchvision's PIL path for hue (Pillow's 8-bit HSV, the hue byte turned), 5 to 20 times slower
(Pillow's two HSV conversions cost ~6 ms for a 256 x 256 image).

The batched form, for images that reach the device whole, is kornia's (batch_ops.py): it draws
the same adjustments, on floats.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from datapipe.image.augment.ops_sample import brightness, color, contrast
from datapipe.image.transforms import ColorJitter

try:  # the optional C extension (setup.py); Pillow does the same, slower, without it
    from datapipe.image._colour import adjust as _adjust_c
except ImportError:
    _adjust_c = None

Range = tuple[float, float]
_NO_FILL = (0, 0, 0)  # the ops' fill argument: unused by the photometric ones
_IDENTITY_LEVELS = np.arange(256, dtype=np.uint8)


def factor_ranges(step: ColorJitter) -> tuple[Range | None, Range | None, Range | None,
                                              Range | None]:
    """(brightness, contrast, saturation, hue) ranges as torchvision's ColorJitter makes them
    from its arguments; None for an adjustment that would change nothing."""
    ranges: list[Range | None] = []
    for name in ("brightness", "contrast", "saturation", "hue"):
        value = getattr(step, name)
        centre = 0.0 if name == "hue" else 1.0
        if isinstance(value, tuple):
            low, high = value
        else:
            low, high = (-value, value) if name == "hue" else (max(0.0, 1 - value), 1 + value)
        ranges.append(None if low == high == centre else (float(low), float(high)))
    return ranges[0], ranges[1], ranges[2], ranges[3]


def draw(ranges: tuple[Range | None, ...],
         rng: np.random.Generator) -> list[tuple[int, float]]:
    """(adjustment, factor) pairs in the order they apply: a random permutation of the four
    (as torchvision's `get_params`), the factors drawn in the fixed order b, c, s, h."""
    order = rng.permutation(4)
    factors = [None if r is None else float(rng.uniform(r[0], r[1])) for r in ranges]
    return [(int(k), factors[k]) for k in order if factors[k] is not None]


def adjust_hue(pixels: np.ndarray, shift: float) -> np.ndarray:
    """The hue turned by `shift` (in [-0.5, 0.5] of a full turn), torchvision's PIL way."""
    pixels = np.ascontiguousarray(pixels)
    height, width = pixels.shape[:2]
    image = Image.frombuffer("RGB", (width, height), pixels, "raw", "RGB", 0, 1)
    step = int(np.int32(shift * 255).astype(np.uint8))  # torchvision's byte, wrapped
    hue = (_IDENTITY_LEVELS.astype(np.int64) + step) % 256
    levels = np.concatenate([hue, _IDENTITY_LEVELS, _IDENTITY_LEVELS]).tolist()
    return np.asarray(image.convert("HSV").point(levels).convert("RGB"))


def _apply(kind: int, pixels: np.ndarray, factor: float) -> np.ndarray:
    if _adjust_c is not None:
        pixels = np.ascontiguousarray(pixels)
        out = np.empty_like(pixels)
        _adjust_c(pixels, out, kind, factor)
        return out
    if kind == 0:
        return brightness(pixels, factor - 1, _NO_FILL)
    if kind == 1:
        return contrast(pixels, factor - 1, _NO_FILL)
    if kind == 2:
        return color(pixels, factor - 1, _NO_FILL)
    return adjust_hue(pixels, factor)


def jitter(pixels: np.ndarray, ranges: tuple[Range | None, ...],
           rng: np.random.Generator) -> np.ndarray:
    """One image's ColorJitter with the adjustments and factors drawn from `rng`."""
    for kind, factor in draw(ranges, rng):
        pixels = _apply(kind, pixels, factor)
    # Pillow's results are read-only views of its bytes; a later step may write in place.
    return pixels if pixels.flags.writeable else pixels.copy()
