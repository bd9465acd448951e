"""RandAugment, TrivialAugmentWide and AutoAugment (ImageNet policy), as torchvision's
`transforms.v2` defines them, per sample in the workers or batched on the device.

Each draws, per image, a list of (op, magnitude) from uniform numbers (`_plan`): the same plan
code serves both paths, which differ only in where the numbers come from (the sample's NumPy
generator, or the batch's torch generator) and in which ops run them (`ops_sample`,
`ops_batch`).
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from datapipe.errors import ArgumentError, DataError
from datapipe.image.augment.ops_batch import apply_layer
from datapipe.image.augment.ops_sample import SAMPLE_OPS
from datapipe.image.augment.policies import (
    AUTO_AUGMENT,
    AUTO_AUGMENT_BINS,
    IMAGENET_POLICY,
    RAND_AUGMENT,
    TRIVIAL_AUGMENT_WIDE,
    OpRange,
)
from datapipe.image.steps import BatchStep, SampleStep
from datapipe.image.transforms import _is_real, _reals

_SPACES: dict[str, dict[str, OpRange]] = {
    "RandAugment": RAND_AUGMENT, "TrivialAugmentWide": TRIVIAL_AUGMENT_WIDE,
    "AutoAugment": AUTO_AUGMENT}


@functools.lru_cache(maxsize=64)
def _tables(space: str, bins: int, height: int,
            width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(op names, magnitudes by op and bin (0 for ops without), whether each op is signed)."""
    ranges = _SPACES[space]
    names = np.array(tuple(ranges))
    table = np.zeros((len(names), bins))
    for row, (op, span) in enumerate(ranges.items()):
        values = span.magnitudes(op, bins, height, width)
        table[row] = 0.0 if values is None else values
    return names, table, np.array([span.signed for span in ranges.values()])


def _whole(owner: str, name: str, value: Any, low: int, high: float = np.inf) -> int:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and \
            low <= value <= high:
        return int(value)
    bound = f"in [{low}, {int(high)}]" if high < np.inf else f">= {low}"
    raise ArgumentError(f"{owner} {name} must be a whole number {bound}, got {value!r}")


def _fill(owner: str, value: Any) -> tuple[float, float, float]:
    fill = (float(value),) * 3 if _is_real(value) else _reals(value, 3)
    if fill is None or not all(0 <= v <= 255 for v in fill):
        raise ArgumentError(f"{owner} fill must be a pixel value in [0, 255] or an (r, g, b) "
                            f"triple of them, got {value!r}")
    return fill


@dataclass(frozen=True)
class _Policy(SampleStep, BatchStep):
    needs_uint8: ClassVar[bool] = True

    def _draws(self) -> int:
        """How many uniform numbers a plan takes per image."""
        raise NotImplementedError

    def _plan(self, uniforms: np.ndarray, height: int,
              width: int) -> tuple[np.ndarray, np.ndarray]:
        """(op names, magnitudes), each (images, ops per image)."""
        raise NotImplementedError

    def apply_sample(self, pixels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if pixels.dtype != np.uint8 or pixels.ndim != 3 or pixels.shape[2] != 3:
            raise DataError(f"{type(self).__name__} takes H x W x 3 uint8 pixels, got "
                            f"{pixels.dtype} of shape {pixels.shape}")
        ops, magnitudes = self._plan(rng.random((1, self._draws())), *pixels.shape[:2])
        fill = tuple(int(v) for v in self.fill)
        for op, magnitude in zip(ops[0], magnitudes[0], strict=True):
            pixels = SAMPLE_OPS[op](pixels, float(magnitude), fill)
        # Pillow's results are read-only views of its bytes; a later step may write in place.
        return pixels if pixels.flags.writeable else pixels.copy()

    def apply_batch(self, images: torch.Tensor, labels: torch.Tensor | None,
                    generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Overwrites `images` where an op changes them. They are made contiguous first: the
        workers' batches arrive channels-last, where kornia's ops and the row copies ran 10 to
        18x slower (RandAugment(2, 9) on 256 images on an H100: 284 ms, against 16 ms)."""
        images = images.contiguous()
        uniforms = torch.rand((len(images), self._draws()), generator=generator,
                              dtype=torch.float64, device=generator.device).cpu().numpy()
        ops, magnitudes = self._plan(uniforms, *images.shape[-2:])
        fill = torch.tensor(self.fill, dtype=images.dtype).div_(255).to(images.device)
        for layer in range(ops.shape[1]):
            images = apply_layer(images, ops[:, layer], magnitudes[:, layer], fill)
        return images, labels


def _signs(signed: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    # torchvision negates a signed op's magnitude when its draw is <= 0.5
    return np.where(signed & (uniforms <= 0.5), -1.0, 1.0)


@dataclass(frozen=True)
class RandAugment(_Policy):
    """`num_ops` ops drawn uniformly per image, all at bin `magnitude` of
    `num_magnitude_bins` (torchvision's `v2.RandAugment`; timm's `rand-m9-n2` is (2, 9) with
    11 bins: docs/augmentation.md)."""

    num_ops: int = 2
    magnitude: int = 9
    num_magnitude_bins: int = 31
    fill: float | tuple[float, float, float] = 0

    def __post_init__(self) -> None:
        _whole("RandAugment", "num_ops", self.num_ops, 0)
        _whole("RandAugment", "num_magnitude_bins", self.num_magnitude_bins, 2)
        _whole("RandAugment", "magnitude", self.magnitude, 0, self.num_magnitude_bins - 1)
        object.__setattr__(self, "fill", _fill("RandAugment", self.fill))

    def _draws(self) -> int:
        return 2 * self.num_ops  # per op: which op, and its sign

    def _plan(self, uniforms: np.ndarray, height: int,
              width: int) -> tuple[np.ndarray, np.ndarray]:
        names, table, signed = _tables("RandAugment", self.num_magnitude_bins, height, width)
        pairs = uniforms.reshape(len(uniforms), self.num_ops, 2)
        op = (pairs[..., 0] * len(names)).astype(np.int64)
        return names[op], table[op, self.magnitude] * _signs(signed[op], pairs[..., 1])


@dataclass(frozen=True)
class TrivialAugmentWide(_Policy):
    """One op per image at a random bin of `num_magnitude_bins`, from the wide ranges
    (torchvision's `v2.TrivialAugmentWide`)."""

    num_magnitude_bins: int = 31
    fill: float | tuple[float, float, float] = 0

    def __post_init__(self) -> None:
        _whole("TrivialAugmentWide", "num_magnitude_bins", self.num_magnitude_bins, 2)
        object.__setattr__(self, "fill", _fill("TrivialAugmentWide", self.fill))

    def _draws(self) -> int:
        return 3  # which op, which bin, its sign

    def _plan(self, uniforms: np.ndarray, height: int,
              width: int) -> tuple[np.ndarray, np.ndarray]:
        bins = self.num_magnitude_bins
        names, table, signed = _tables("TrivialAugmentWide", bins, height, width)
        op = (uniforms[:, :1] * len(names)).astype(np.int64)
        level = (uniforms[:, 1:2] * bins).astype(np.int64)
        return names[op], table[op, level] * _signs(signed[op], uniforms[:, 2:3])


def _imagenet_arrays(names: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """IMAGENET_POLICY as arrays (sub-policy, op): op index, probability, magnitude bin."""
    index = {name: i for i, name in enumerate(names)}
    ops = np.array([[index[op] for op, _, _ in sub] for sub in IMAGENET_POLICY])
    chance = np.array([[p for _, p, _ in sub] for sub in IMAGENET_POLICY])
    level = np.array([[b or 0 for _, _, b in sub] for sub in IMAGENET_POLICY])
    return ops, chance, level


@dataclass(frozen=True)
class AutoAugment(_Policy):
    """A sub-policy of two ops drawn per image, each applied with its own probability at its
    own magnitude bin (torchvision's `v2.AutoAugment(AutoAugmentPolicy.IMAGENET)`)."""

    policy: str = "imagenet"
    fill: float | tuple[float, float, float] = 0

    def __post_init__(self) -> None:
        policy = getattr(self.policy, "value", self.policy)  # torchvision's enum as well
        if policy != "imagenet":
            raise ArgumentError(f"AutoAugment policy must be 'imagenet' (the one built in), got "
                                f"{self.policy!r}")
        object.__setattr__(self, "policy", policy)
        object.__setattr__(self, "fill", _fill("AutoAugment", self.fill))

    def _draws(self) -> int:
        return 5  # which sub-policy; per op: whether it applies, its sign

    def _plan(self, uniforms: np.ndarray, height: int,
              width: int) -> tuple[np.ndarray, np.ndarray]:
        names, table, signed = _tables("AutoAugment", AUTO_AUGMENT_BINS, height, width)
        ops, chance, level = _imagenet_arrays(names)
        sub = (uniforms[:, 0] * len(IMAGENET_POLICY)).astype(np.int64)
        op, applies = ops[sub], uniforms[:, [1, 3]] <= chance[sub]
        magnitudes = table[op, level[sub]] * _signs(signed[op], uniforms[:, [2, 4]])
        return np.where(applies, names[op], "Identity"), np.where(applies, magnitudes, 0.0)
