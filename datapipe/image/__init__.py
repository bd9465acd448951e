"""Image decode backends and transforms."""

from datapipe.image.augment import (
    AutoAugment,
    Mixup,
    RandAugment,
    RandomErasing,
    TrivialAugmentWide,
)
from datapipe.image.steps import BatchStep, PerBatch, PerSample, SampleStep
from datapipe.image.transforms import (
    CenterCrop,
    ColorJitter,
    HorizontalFlip,
    Normalize,
    RandomResizedCrop,
)

__all__ = ["AutoAugment", "BatchStep", "CenterCrop", "ColorJitter", "HorizontalFlip", "Mixup",
           "Normalize", "PerBatch", "PerSample", "RandAugment", "RandomErasing",
           "RandomResizedCrop", "SampleStep", "TrivialAugmentWide"]
