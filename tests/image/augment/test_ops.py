"""Each op of the RandAugment family, per sample (Pillow, tables) and batched, against kornia's
own function on the same parameters. kornia computes in floats: a per-sample op, which rounds
or truncates to a byte as torchvision's uint8 ops do, is within one byte of it."""

from __future__ import annotations

import math

import kornia
import numpy as np
import pytest
import torch

from datapipe.image.augment.ops_batch import BATCH_OPS, apply_layer
from datapipe.image.augment.ops_sample import SAMPLE_OPS
from tests.image.augment.samples import as_batch, as_bytes, photo

E = kornia.enhance
T = kornia.geometry.transform

# op -> (magnitude, kornia's result on a float batch x at that magnitude)
PHOTOMETRIC = {
    "Brightness": (0.45, lambda x: E.adjust_gamma(x, 1.0, gain=1.45)),
    "Color": (-0.6, lambda x: E.adjust_saturation_with_gray_subtraction(x, 0.4)),
    "Contrast": (0.8, lambda x: E.adjust_contrast_with_mean_subtraction(x, 1.8)),
    "Sharpness": (0.9, lambda x: E.sharpness(x, 1.9)),
    "Posterize": (5, lambda x: E.posterize(x, 5)),
    "Solarize": (0.6, lambda x: E.solarize(x, 0.6)),
    "AutoContrast": (0.0, lambda x: E.normalize_min_max(x, 0.0, 1.0, eps=0.0)),
    "Equalize": (0.0, E.equalize),
    "Invert": (0.0, E.invert),
}


def _rotate(x: torch.Tensor, degrees: float) -> torch.Tensor:
    return T.rotate(x, torch.tensor([degrees]), mode="nearest")


def _translate(x: torch.Tensor, dx: float, dy: float) -> torch.Tensor:
    return T.translate(x, torch.tensor([[dx, dy]]), mode="nearest")


def _shear(x: torch.Tensor, sx: float, sy: float) -> torch.Tensor:
    # torchvision shears about the image's top-left corner: (-0.5, -0.5) in kornia's
    # pixel-centre coordinates; kornia's angles are the factors' arctangents.
    matrix = T.get_shear_matrix2d(torch.tensor([[-0.5, -0.5]]),
                                  torch.tensor([math.atan(sx)]), torch.tensor([math.atan(sy)]))
    return T.warp_affine(x, matrix[:, :2], x.shape[-2:], mode="nearest")


GEOMETRIC = {
    "Rotate": (21.0, lambda x: _rotate(x, 21.0)),
    "TranslateX": (-13.7, lambda x: _translate(x, -13.0, 0.0)),  # whole pixels, towards zero
    "TranslateY": (9.2, lambda x: _translate(x, 0.0, 9.0)),
    "ShearX": (0.27, lambda x: _shear(x, 0.27, 0.0)),
    "ShearY": (-0.19, lambda x: _shear(x, 0.0, -0.19)),
}


@pytest.mark.parametrize("op", sorted(PHOTOMETRIC))
def test_photometric_op_per_sample_is_kornia_within_a_byte(op: str) -> None:
    image = photo()
    magnitude, reference = PHOTOMETRIC[op]
    ours = SAMPLE_OPS[op](image, magnitude, (0, 0, 0)).astype(np.float64)
    expected = as_bytes(reference(as_batch(image)))[0]
    assert np.abs(ours - expected).max() <= 1.0
    assert not np.array_equal(ours, image)  # the op did something


@pytest.mark.parametrize("op", sorted(PHOTOMETRIC))
def test_photometric_op_batched_is_kornia(op: str) -> None:
    magnitude, reference = PHOTOMETRIC[op]
    images = [photo(seed=s) for s in range(3)]
    ours = BATCH_OPS[op](as_batch(*images), torch.full((3,), float(magnitude)))
    torch.testing.assert_close(ours, reference(as_batch(*images)), rtol=0, atol=1e-5)


@pytest.mark.parametrize("op", sorted(GEOMETRIC))
def test_geometric_op_both_paths_are_kornia(op: str) -> None:
    image = photo()
    magnitude, reference = GEOMETRIC[op]
    expected = reference(as_batch(image))
    batched = apply_layer(as_batch(image), np.array([op]), np.array([magnitude]),
                          torch.zeros(3))
    # Nearest-neighbour sampling: a point exactly between two pixels may go either way.
    assert (batched == expected).all(dim=1).float().mean() > 0.999
    ours = SAMPLE_OPS[op](image, magnitude, (0, 0, 0))
    same = np.all(ours == np.rint(as_bytes(expected)[0]), axis=-1)
    assert same.mean() > 0.99
    assert not np.array_equal(ours, image)


@pytest.mark.parametrize("op", sorted(GEOMETRIC))
def test_geometric_ops_fill_what_leaves_the_image(op: str) -> None:
    image = photo()
    magnitude = {"Rotate": 40.0}.get(op, GEOMETRIC[op][0] * 2)
    fill = (10, 200, 30)
    ours = SAMPLE_OPS[op](image, magnitude, fill)
    batched = as_bytes(apply_layer(as_batch(image), np.array([op]), np.array([magnitude]),
                                   torch.tensor(fill) / 255))[0]
    corner_in = np.all(np.rint(batched) == fill, axis=-1)
    assert corner_in.sum() > 20
    # what the warp filled, the sample path filled too (up to nearest-neighbour ties)
    assert np.all(ours[corner_in] == fill, axis=-1).mean() > 0.97


def test_a_layer_runs_each_sample_through_its_own_op() -> None:
    images = [photo(seed=s) for s in range(6)]
    ops = np.array(["Invert", "Identity", "Rotate", "Posterize", "Invert", "ShearX"])
    magnitudes = np.array([0.0, 0.0, -12.0, 4.0, 0.0, 0.1])
    out = apply_layer(as_batch(*images), ops, magnitudes, torch.zeros(3))
    for i, (op, magnitude) in enumerate(zip(ops, magnitudes, strict=True)):
        expected = SAMPLE_OPS[op](images[i], magnitude, (0, 0, 0)).astype(np.float64)
        same = np.abs(as_bytes(out[i:i + 1])[0] - expected) <= 1.0
        assert same.all(axis=-1).mean() > 0.99, op
