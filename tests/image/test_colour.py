"""The colour extension's adjustments: torchvision's uint8 arithmetic on known pixels, and bad
arguments refused. (Whole images against kornia's ColorJitter: tests/loader/test_patch_augment.)"""

from __future__ import annotations

import numpy as np
import pytest

colour = pytest.importorskip("datapipe.image._colour")


def adjusted(pixels: list[list[int]], kind: int, factor: float) -> list[list[int]]:
    src = np.array(pixels, np.uint8).reshape(1, -1, 3)
    out = np.empty_like(src)
    colour.adjust(src, out, kind, factor)
    return out.reshape(-1, 3).tolist()


def test_each_adjustment_on_known_pixels() -> None:
    # brightness: v * f clamped and truncated
    assert adjusted([[10, 100, 200]], 0, 1.5) == [[15, 150, 255]]
    # contrast: blended with the mean of the floored grey; the grey weights sum to 0.9999, so
    # the grey of (100, 100, 100) is 99 and of (200, 200, 200) 199, as in torchvision
    assert adjusted([[100, 100, 100], [100, 100, 100]], 1, 2.0) == [[101, 101, 101]] * 2
    assert adjusted([[0, 0, 0], [200, 200, 200]], 1, 0.5) == [[49, 49, 49], [149, 149, 149]]
    # saturation 0: each pixel its floored grey
    grey = int(0.2989 * 200 + 0.587 * 50 + 0.114 * 10)
    assert adjusted([[200, 50, 10]], 2, 0.0) == [[grey] * 3]
    # hue: half a turn takes pure red to cyan, a third green to blue; grey stays grey
    assert adjusted([[255, 0, 0], [0, 255, 0], [90, 90, 90]], 3, 0.5) == \
        [[0, 255, 255], [255, 0, 255], [90, 90, 90]]
    assert adjusted([[0, 255, 0]], 3, 1 / 3) == [[0, 0, 255]]


def test_bad_arguments_are_refused() -> None:
    pixels = np.zeros((2, 2, 3), np.uint8)
    with pytest.raises(ValueError, match="same number of RGB uint8 values"):
        colour.adjust(pixels, np.zeros((2, 3, 3), np.uint8), 0, 1.0)
    with pytest.raises(ValueError, match="kind must be"):
        colour.adjust(pixels, np.zeros_like(pixels), 4, 1.0)
