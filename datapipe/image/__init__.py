"""Image decode backends and transforms."""

from datapipe.image.transforms import (
    CenterCrop,
    ColorJitter,
    HorizontalFlip,
    Normalize,
    RandomResizedCrop,
)

__all__ = ["CenterCrop", "ColorJitter", "HorizontalFlip", "Normalize", "RandomResizedCrop"]
