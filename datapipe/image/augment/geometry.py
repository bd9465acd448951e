"""Where each geometric op of the RandAugment family reads its pixels from.

One 2 x 3 matrix per op maps an output pixel to the input point it samples, in pixel-edge
coordinates (the top-left corner of the image is (0, 0), pixel (i, j) spans [j, j + 1) x
[i, i + 1)): torchvision's and Pillow's convention. The per-sample ops hand it to Pillow as it
is; the batched ops turn it into kornia's pixel-centre convention (`centre_forward`).
"""

from __future__ import annotations

import math

import numpy as np

GEOMETRIC_OPS = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")


def inverse_affine(op: str, magnitude: float, height: int, width: int) -> np.ndarray:
    """The output -> input map of `op` at `magnitude`, as torchvision defines the op: shears
    about the image's top-left corner by the factor `magnitude`, translations by int(magnitude)
    pixels, rotations by `magnitude` degrees counter-clockwise about the image's centre."""
    if op == "ShearX":
        return np.array([[1.0, magnitude, 0.0], [0.0, 1.0, 0.0]])
    if op == "ShearY":
        return np.array([[1.0, 0.0, 0.0], [magnitude, 1.0, 0.0]])
    if op == "TranslateX":
        return np.array([[1.0, 0.0, -float(int(magnitude))], [0.0, 1.0, 0.0]])
    if op == "TranslateY":
        return np.array([[1.0, 0.0, 0.0], [0.0, 1.0, -float(int(magnitude))]])
    if op == "Rotate":
        cos, sin = math.cos(math.radians(magnitude)), math.sin(math.radians(magnitude))
        cx, cy = width / 2, height / 2
        return np.array([[cos, -sin, cx - cos * cx + sin * cy],
                         [sin, cos, cy - sin * cx - cos * cy]])
    raise ValueError(f"not a geometric op: {op}")


def centre_forward(inverse: np.ndarray) -> np.ndarray:
    """(n, 2, 3) edge-coordinate output -> input maps as (n, 2, 3) input -> output maps in
    pixel-centre coordinates (pixel (i, j) at (j, i)): what kornia's `warp_affine` takes."""
    linear, shift = inverse[:, :, :2], inverse[:, :, 2]
    # centre = edge - 0.5 on both sides of the map
    centre_shift = shift + linear @ np.array([0.5, 0.5]) - 0.5
    square = np.zeros((len(inverse), 3, 3))
    square[:, :2, :2], square[:, :2, 2], square[:, 2, 2] = linear, centre_shift, 1.0
    return np.linalg.inv(square)[:, :2, :]
