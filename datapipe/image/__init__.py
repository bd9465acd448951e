"""Image decode backends and transforms."""

from datapipe.image.steps import BatchStep, PerBatch, PerSample, SampleStep
from datapipe.image.transforms import (
    CenterCrop,
    ColorJitter,
    HorizontalFlip,
    Normalize,
    RandomResizedCrop,
)

__all__ = ["BatchStep", "CenterCrop", "ColorJitter", "HorizontalFlip", "Normalize", "PerBatch",
           "PerSample", "RandomResizedCrop", "SampleStep"]
