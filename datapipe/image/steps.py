"""The two kinds of augmentation step a pipeline runs besides its planned crop and flip: one
per sample in the workers, one per batch where the batch lives."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
import torch

from datapipe.image.transforms import Transform


class SampleStep(Transform, ABC):
    """Runs on each sample's HWC pixels in a worker; its randomness comes from `rng` alone."""

    # True for steps that only make sense on uint8 pixels (refused after a Normalize).
    needs_uint8: ClassVar[bool] = False

    @abstractmethod
    def apply_sample(self, pixels: np.ndarray, rng: np.random.Generator) -> np.ndarray: ...


class BatchStep(Transform, ABC):
    """Runs on a whole N x C x H x W float batch on its device; randomness from `generator`."""

    @abstractmethod
    def apply_batch(self, images: torch.Tensor, labels: torch.Tensor | None,
                    generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None]: ...
