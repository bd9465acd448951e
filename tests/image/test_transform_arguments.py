"""Transforms check their arguments when they are made: before, a zero std gave batches of
infinities, a two-value mean a worker's traceback at the first batch, and `HorizontalFlip(p=2)`
flipped every image without a word."""

from __future__ import annotations

import math

import numpy as np
import pytest

from datapipe.errors import ArgumentError
from datapipe.image import CenterCrop, ColorJitter, HorizontalFlip, Normalize, RandomResizedCrop

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Normalize(std=(0.229, 0.0, 0.225)), "Normalize std must be 3 finite numbers above 0"),
    (lambda: Normalize(std=(0.229, -0.2, 0.225)), "Normalize std must be"),
    (lambda: Normalize(std=(0.229, NAN, 0.225)), "Normalize std must be"),
    (lambda: Normalize(std=(INF, 1.0, 1.0)), "Normalize std must be"),
    (lambda: Normalize(std=(0.5, 0.5)), "Normalize std must be"),
    (lambda: Normalize(std=0.5), "Normalize std must be"),
    (lambda: Normalize(mean=(0.5, 0.5)), r"Normalize mean must be 3 finite numbers \(one per "
                                         r"channel\), got \(0.5, 0.5\)"),
    (lambda: Normalize(mean=(0.5, 0.5, 0.5, 0.5)), "Normalize mean must be"),
    (lambda: Normalize(mean=(0.5, NAN, 0.5)), "Normalize mean must be"),
    (lambda: Normalize(mean="rgb"), "Normalize mean must be"),
    (lambda: HorizontalFlip(p=2), r"HorizontalFlip p must be a probability in \[0, 1\], got 2"),
    (lambda: HorizontalFlip(p=-0.1), "HorizontalFlip p must be"),
    (lambda: HorizontalFlip(p=NAN), "HorizontalFlip p must be"),
    (lambda: HorizontalFlip(p="0.5"), "HorizontalFlip p must be"),
    (lambda: CenterCrop(16.5), r"CenterCrop size must be a positive integer or a \(height, "
                               r"width\) pair of them, got 16.5"),
    (lambda: CenterCrop(0), "CenterCrop size must be"),
    (lambda: CenterCrop(True), "CenterCrop size must be"),
    (lambda: CenterCrop((16,)), "CenterCrop size must be"),
    (lambda: CenterCrop((16, 8.0)), "CenterCrop size must be"),
    (lambda: CenterCrop(16, fraction=0), r"CenterCrop fraction must be in \(0, 1\]"),
    (lambda: CenterCrop(16, fraction=1.5), "CenterCrop fraction must be"),
    (lambda: CenterCrop(16, fraction="all"), "CenterCrop fraction must be"),
    (lambda: RandomResizedCrop(-3), "RandomResizedCrop size must be"),
    (lambda: RandomResizedCrop(16, scale=(0.5,)), "RandomResizedCrop scale must satisfy"),
    (lambda: RandomResizedCrop(16, scale=(0.5, 2)), "RandomResizedCrop scale must satisfy"),
    (lambda: RandomResizedCrop(16, scale=(0.9, 0.5)), "RandomResizedCrop scale must satisfy"),
    (lambda: RandomResizedCrop(16, scale=(NAN, 1)), "RandomResizedCrop scale must satisfy"),
    (lambda: RandomResizedCrop(16, ratio=(1, INF)), "RandomResizedCrop ratio must be positive"),
    (lambda: RandomResizedCrop(16, ratio=(0, 1)), "RandomResizedCrop ratio must be positive"),
    (lambda: RandomResizedCrop(16, ratio=1.0), "RandomResizedCrop ratio must be positive"),
    (lambda: ColorJitter(brightness=-1), r"ColorJitter brightness must be a finite number >= 0 "
                                         r"or an ordered \(lo, hi\) pair of them, got -1"),
    (lambda: ColorJitter(contrast=NAN), "ColorJitter contrast must be"),
    (lambda: ColorJitter(saturation=(1.5, 0.5)), "ColorJitter saturation must be"),
    (lambda: ColorJitter(hue=0.7), r"ColorJitter hue must be a number in \[0, 0.5\]"),
    (lambda: ColorJitter(hue=(-0.6, 0.1)), "ColorJitter hue must be"),
])
def test_bad_transform_arguments_are_refused_when_made(make, message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        make()


def test_good_arguments_of_any_numeric_type_are_taken_as_plain_values() -> None:
    normalize = Normalize(mean=np.array([0.5, 0.4, 0.3]), std=[1, 2, 3])
    assert normalize.mean == (0.5, 0.4, 0.3) and normalize.std == (1.0, 2.0, 3.0)
    crop = RandomResizedCrop(np.int64(16), scale=[0.2, 1], ratio=(np.float32(0.5), 2))
    assert crop.scale == (0.2, 1.0) and crop.ratio == (0.5, 2.0)
    assert CenterCrop((16, 8)).size == (16, 8)
    assert HorizontalFlip(p=0).p == 0 and HorizontalFlip(p=1).p == 1
    jitter = ColorJitter(0.4, (0.5, 1.5), 0, (-0.1, 0.1))
    assert (jitter.brightness, jitter.contrast, jitter.hue) == (0.4, (0.5, 1.5), (-0.1, 0.1))


def test_a_jitter_given_as_ranges_runs() -> None:
    import torch

    pytest.importorskip("kornia")
    from datapipe.image.batch_ops import BatchTransforms

    jitter = ColorJitter(brightness=(0.8, 1.2), hue=(-0.05, 0.05))
    images = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
    out = BatchTransforms((jitter,), seed=0)(images, 0, 0)
    assert out.shape == (2, 3, 8, 8) and torch.isfinite(out).all()

