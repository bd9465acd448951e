"""Image decode backends and transforms.

The transforms load with the package; the steps and recipes load on first use, since they need
torch, and `datapipe convert images` (which decodes through this package) has no use for it.
"""

from __future__ import annotations

import importlib
from typing import Any

from datapipe.image.buckets import Buckets
from datapipe.image.transforms import (
    CenterCrop,
    ColorJitter,
    HorizontalFlip,
    Normalize,
    RandomResizedCrop,
)

_LAZY = {**dict.fromkeys(("BatchStep", "PerBatch", "PerSample", "SampleStep"),
                         "datapipe.image.steps"),
         **dict.fromkeys(("AutoAugment", "Mixup", "RandAugment", "RandomErasing",
                          "TrivialAugmentWide"), "datapipe.image.augment")}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'datapipe.image' has no attribute {name!r}")


__all__ = ["AutoAugment", "BatchStep", "Buckets", "CenterCrop", "ColorJitter", "HorizontalFlip",
           "Mixup", "Normalize", "PerBatch", "PerSample", "RandAugment", "RandomErasing",
           "RandomResizedCrop", "SampleStep", "TrivialAugmentWide"]
