"""RandomErasing: a random box of each image overwritten, as timm and torchvision do it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from datapipe.errors import ArgumentError, DataError
from datapipe.image.steps import BatchStep, SampleStep
from datapipe.image.transforms import _interval, _is_real, _reals

_TRIES = 10  # boxes drawn per image until one fits (timm's and torchvision's count)
_DRAWS = 1 + 2 * _TRIES + 2  # uniforms per image: erase?, (area, aspect) per try, top, left


@dataclass(frozen=True)
class RandomErasing(SampleStep, BatchStep):
    """With probability `p`, a box of `scale` of the image's area and aspect ratio within
    `ratio` is overwritten with `value`: "random" is per-pixel standard normal noise (timm's
    mode "pixel", for normalised images; uniform bytes on uint8 pixels), a number or an
    (r, g, b) triple is written as it is, in the units of the pixels it lands in. Of ten boxes
    drawn, the first that fits is erased; the image is left alone when none fits."""

    p: float = 0.5
    scale: tuple[float, float] = (0.02, 0.33)
    ratio: tuple[float, float] = (0.3, 3.3)
    value: str | float | tuple[float, float, float] = "random"
    needs_uint8: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if not (_is_real(self.p) and 0 <= self.p <= 1):
            raise ArgumentError(f"RandomErasing p must be a probability in [0, 1], got "
                                f"{self.p!r}")
        scale, ratio = _interval(self.scale, 0, 1), _interval(self.ratio, 0, math.inf)
        if scale is None:
            raise ArgumentError(f"RandomErasing scale must satisfy 0 < lo <= hi <= 1, got "
                                f"{self.scale!r}")
        if ratio is None:
            raise ArgumentError(f"RandomErasing ratio must be positive and ordered, got "
                                f"{self.ratio!r}")
        object.__setattr__(self, "scale", scale)
        object.__setattr__(self, "ratio", ratio)
        object.__setattr__(self, "value", _value(self.value))

    def apply_sample(self, pixels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if pixels.dtype != np.uint8 and not np.issubdtype(pixels.dtype, np.floating):
            raise DataError(f"RandomErasing takes uint8 or float pixels, got {pixels.dtype}")
        height, width, channels = pixels.shape
        erase, top, left, h, w = self._boxes(rng.random((1, _DRAWS)), height, width)
        if not erase[0]:
            return pixels
        out = pixels.copy()
        out[top[0]:top[0] + h[0], left[0]:left[0] + w[0]] = \
            self._patch((h[0], w[0], channels), pixels.dtype, rng)
        return out

    def apply_batch(self, images: torch.Tensor, labels: torch.Tensor | None,
                    generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Overwrites the erased images of `images`."""
        uniforms = torch.rand((len(images), _DRAWS), generator=generator, dtype=torch.float64,
                              device=generator.device).cpu().numpy()
        erase, top, left, h, w = self._boxes(uniforms, *images.shape[-2:])
        rows = np.flatnonzero(erase)
        if len(rows) == 0:
            return images, labels
        inside = _box_masks(images, top[rows], left[rows], h[rows], w[rows])
        shape = (len(rows), *images.shape[1:])
        patch = self._batch_patch(shape, images, generator)
        index = torch.from_numpy(rows).to(images.device)
        images.index_copy_(0, index, torch.where(inside, patch, images[index]))
        return images, labels

    def _boxes(self, uniforms: np.ndarray, height: int, width: int) -> tuple[np.ndarray, ...]:
        """Per image: (erased?, top, left, box height, box width)."""
        tries = uniforms[:, 1:1 + 2 * _TRIES].reshape(len(uniforms), _TRIES, 2)
        area = height * width * (self.scale[0] + tries[..., 0] * (self.scale[1] - self.scale[0]))
        low, high = math.log(self.ratio[0]), math.log(self.ratio[1])
        aspect = np.exp(low + tries[..., 1] * (high - low))
        h = np.rint(np.sqrt(area * aspect)).astype(np.int64)
        w = np.rint(np.sqrt(area / aspect)).astype(np.int64)
        fits = (h < height) & (w < width)
        first = np.argmax(fits, axis=1)
        rows = np.arange(len(uniforms))
        h, w = h[rows, first], w[rows, first]
        top = (uniforms[:, -2] * (height - h + 1)).astype(np.int64)
        left = (uniforms[:, -1] * (width - w + 1)).astype(np.int64)
        erase = (uniforms[:, 0] < self.p) & fits.any(axis=1)
        return erase, top, left, h, w

    def _patch(self, shape: tuple[int, int, int], dtype: np.dtype,
               rng: np.random.Generator) -> np.ndarray:
        if isinstance(self.value, str):  # "random"
            if dtype == np.uint8:
                return rng.integers(0, 256, shape, dtype=np.uint8)
            return rng.standard_normal(shape, dtype=np.float32).astype(dtype)
        value = np.asarray(self.value)
        return np.clip(np.rint(value), 0, 255).astype(dtype) if dtype == np.uint8 else value

    def _batch_patch(self, shape: tuple[int, ...], images: torch.Tensor,
                     generator: torch.Generator) -> torch.Tensor:
        if not isinstance(self.value, str):
            return torch.tensor(self.value, dtype=images.dtype).view(1, -1, 1, 1) \
                .to(images.device)
        return torch.randn(shape, generator=_on_device(generator, images.device),
                           device=images.device).to(images.dtype)


def _value(value: Any) -> str | float | tuple[float, ...]:
    if isinstance(value, str) and value == "random":
        return value
    if _is_real(value):
        return float(value)
    triple = _reals(value, 3)
    if triple is None:
        raise ArgumentError(f'RandomErasing value must be "random", a number or an (r, g, b) '
                            f"triple of numbers, got {value!r}")
    return triple


def _box_masks(images: torch.Tensor, top: np.ndarray, left: np.ndarray, h: np.ndarray,
               w: np.ndarray) -> torch.Tensor:
    """(k, 1, H, W): True inside each image's box."""
    def span(start: np.ndarray, size: np.ndarray, length: int) -> torch.Tensor:
        bounds = torch.from_numpy(np.stack([start, start + size], axis=1)).to(images.device)
        at = torch.arange(length, device=images.device)
        return (at >= bounds[:, :1]) & (at < bounds[:, 1:])
    height, width = images.shape[-2:]
    return (span(top, h, height)[:, None, :, None] & span(left, w, width)[:, None, None, :])


def _on_device(generator: torch.Generator, device: torch.device) -> torch.Generator:
    """`generator` where it can draw on `device`, else one seeded from it there: the noise is
    made where the batch lives, not copied to it."""
    if generator.device.type == device.type:
        return generator
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
    return torch.Generator(device=device).manual_seed(seed)
