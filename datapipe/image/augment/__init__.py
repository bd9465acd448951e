"""The recipes people train with, built in: each runs per sample in the workers (NumPy and
Pillow on uint8 pixels) or batched on the batch's device (torch and kornia); Mixup only on
the batch."""

from datapipe.image.augment.auto_augment import AutoAugment, RandAugment, TrivialAugmentWide
from datapipe.image.augment.erasing import RandomErasing
from datapipe.image.augment.mixup import Mixup

__all__ = ["AutoAugment", "Mixup", "RandAugment", "RandomErasing", "TrivialAugmentWide"]
