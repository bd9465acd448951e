"""The recipes people train with, built in: each runs per sample in the workers (NumPy and
Pillow on uint8 pixels) or batched on the batch's device (torch and kornia)."""

from datapipe.image.augment.auto_augment import AutoAugment, RandAugment, TrivialAugmentWide

__all__ = ["AutoAugment", "RandAugment", "TrivialAugmentWide"]
