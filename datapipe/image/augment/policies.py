"""The op lists and magnitude tables of RandAugment, TrivialAugmentWide and AutoAugment's
ImageNet policy, as torchvision's `transforms.v2` defines them.

A table gives each op its magnitudes by bin: `magnitudes(op, bins, height, width)` is None for
ops without one. Signed ops apply a drawn magnitude with a random sign (one chance in two).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class OpRange:
    """An op's magnitudes: `bins` evenly spaced values from `start` to `stop`, the translations'
    as fractions of the image's width or height; posterize's rounded to whole bits."""

    start: float | None = None
    stop: float | None = None
    signed: bool = False
    of_size: bool = False  # a fraction of the side the op moves along

    def magnitudes(self, op: str, bins: int, height: int, width: int) -> np.ndarray | None:
        if self.start is None or self.stop is None:
            return None
        if op == "Posterize":
            # torchvision: 8 - arange(bins) / ((bins - 1) / drop), rounded half to even
            drop = np.float32(self.start - self.stop)
            steps = np.arange(bins, dtype=np.float32) / np.float32((bins - 1) / drop)
            return np.round(np.float32(self.start) - steps).astype(np.float64)
        side = (height if op == "TranslateY" else width) if self.of_size else 1
        return np.linspace(self.start * side, self.stop * side, bins, dtype=np.float32) \
            .astype(np.float64)


_TRANSLATE = 150.0 / 331.0  # of the side, from the AutoAugment paper's 150 pixels of 331

RAND_AUGMENT: dict[str, OpRange] = {
    "Identity": OpRange(),
    "ShearX": OpRange(0.0, 0.3, signed=True),
    "ShearY": OpRange(0.0, 0.3, signed=True),
    "TranslateX": OpRange(0.0, _TRANSLATE, signed=True, of_size=True),
    "TranslateY": OpRange(0.0, _TRANSLATE, signed=True, of_size=True),
    "Rotate": OpRange(0.0, 30.0, signed=True),
    "Brightness": OpRange(0.0, 0.9, signed=True),
    "Color": OpRange(0.0, 0.9, signed=True),
    "Contrast": OpRange(0.0, 0.9, signed=True),
    "Sharpness": OpRange(0.0, 0.9, signed=True),
    "Posterize": OpRange(8.0, 4.0),
    "Solarize": OpRange(1.0, 0.0),
    "AutoContrast": OpRange(),
    "Equalize": OpRange(),
}

TRIVIAL_AUGMENT_WIDE: dict[str, OpRange] = {
    "Identity": OpRange(),
    "ShearX": OpRange(0.0, 0.99, signed=True),
    "ShearY": OpRange(0.0, 0.99, signed=True),
    "TranslateX": OpRange(0.0, 32.0, signed=True),
    "TranslateY": OpRange(0.0, 32.0, signed=True),
    "Rotate": OpRange(0.0, 135.0, signed=True),
    "Brightness": OpRange(0.0, 0.99, signed=True),
    "Color": OpRange(0.0, 0.99, signed=True),
    "Contrast": OpRange(0.0, 0.99, signed=True),
    "Sharpness": OpRange(0.0, 0.99, signed=True),
    "Posterize": OpRange(8.0, 2.0),
    "Solarize": OpRange(1.0, 0.0),
    "AutoContrast": OpRange(),
    "Equalize": OpRange(),
}

# AutoAugment's ops, magnitudes in 10 bins; its policy names a bin for each op.
AUTO_AUGMENT_BINS = 10
AUTO_AUGMENT: dict[str, OpRange] = {
    **{op: r for op, r in RAND_AUGMENT.items() if op != "Identity"},
    "Invert": OpRange(),
}

# 25 sub-policies of two (op, probability, magnitude bin) each; one is drawn per image.
IMAGENET_POLICY: tuple[tuple[tuple[str, float, int | None], ...], ...] = (
    (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
    (("Solarize", 0.6, 3), ("Equalize", 0.6, None)),
    (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
    (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)),
    (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
    (("Rotate", 0.8, 8), ("Color", 0.4, 0)),
    (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
    (("Equalize", 0.0, None), ("Equalize", 0.8, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
    (("Color", 0.8, 8), ("Solarize", 0.8, 7)),
    (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
    (("ShearX", 0.6, 5), ("Equalize", 1.0, None)),
    (("Color", 0.4, 0), ("Equalize", 0.6, None)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
)
