"""ICC profiles built from primaries, byte by byte, and a numpy reference of what LittleCMS
should make of them: the tests need neither LittleCMS to make profiles nor to check them."""

from __future__ import annotations

import struct

import numpy as np

D50 = np.array([0.9642, 1.0, 0.8249])
D65 = np.array([0.95047, 1.0, 1.08883])
_BRADFORD = np.array([[0.8951, 0.2664, -0.1614], [-0.7502, 1.7135, 0.0367],
                      [0.0389, -0.0685, 1.0296]])
SRGB_PRIMARIES = ((0.64, 0.33), (0.30, 0.60), (0.15, 0.06))
# name: (primaries, white, tone curve: a gamma, or "srgb" for the sRGB curve)
SPACES = {
    "adobe-rgb": (((0.64, 0.33), (0.21, 0.71), (0.15, 0.06)), D65, 563 / 256),
    "display-p3": (((0.680, 0.320), (0.265, 0.690), (0.150, 0.060)), D65, "srgb"),
    "prophoto": (((0.7347, 0.2653), (0.1596, 0.8404), (0.0366, 0.0001)), D50, 1.8),
}
_SRGB_CURVE = (2.4, 1 / 1.055, 0.055 / 1.055, 1 / 12.92, 0.04045)


def rgb_to_xyz_d50(primaries: tuple, white: np.ndarray) -> np.ndarray:
    """The matrix from linear RGB to XYZ, chromatically adapted to D50 (Bradford), as an ICC
    profile's colourant tags hold it."""
    xyz = np.array([[x / y, 1.0, (1 - x - y) / y] for x, y in primaries]).T
    matrix = xyz * np.linalg.solve(xyz, white)
    cone = _BRADFORD @ D50 / (_BRADFORD @ white)
    return np.linalg.inv(_BRADFORD) @ np.diag(cone) @ _BRADFORD @ matrix


def _s15(value: float) -> bytes:
    return struct.pack(">i", round(value * 65536))


def _xyz(column: np.ndarray) -> bytes:
    return b"XYZ \0\0\0\0" + b"".join(_s15(v) for v in column)


def _curve(curve: float | str) -> bytes:
    if curve == "srgb":  # parametric type 3
        return b"para\0\0\0\0" + struct.pack(">HH", 3, 0) + b"".join(map(_s15, _SRGB_CURVE))
    return b"curv\0\0\0\0" + struct.pack(">IH", 1, round(curve * 256)) + b"\0\0"


def _description(text: str) -> bytes:
    ascii_text = text.encode() + b"\0"
    return (b"desc\0\0\0\0" + struct.pack(">I", len(ascii_text)) + ascii_text
            + struct.pack(">II", 0, 0) + struct.pack(">HB", 0, 0) + b"\0" * 67)


def _profile(space: bytes, tags: list[tuple[bytes, bytes]]) -> bytes:
    """An ICC v2.1 display profile with `tags`, laid out after the 128-byte header."""
    table_size = 4 + 12 * len(tags)
    offset, table, data = 128 + table_size, [], b""
    for signature, body in tags:
        body += b"\0" * (-len(body) % 4)
        table.append(struct.pack(">4sII", signature, offset + len(data), len(body)))
        data += body
    size = 128 + table_size + len(data)
    header = (struct.pack(">I", size) + b"none" + bytes([2, 0x10, 0, 0]) + b"mntr" + space
              + b"XYZ " + b"\0" * 12 + b"acsp" + b"\0" * 24 + b"\0" * 4
              + b"".join(_s15(v) for v in D50) + b"\0" * 4)
    header += b"\0" * (128 - len(header))
    return header + struct.pack(">I", len(tags)) + b"".join(table) + data


def rgb_profile(name: str) -> bytes:
    primaries, white, curve = SPACES[name]
    matrix = rgb_to_xyz_d50(primaries, white)
    tags = [(b"desc", _description(name)), (b"wtpt", _xyz(D50))]
    tags += [(sig, _xyz(matrix[:, i])) for i, sig in enumerate((b"rXYZ", b"gXYZ", b"bXYZ"))]
    tags += [(sig, _curve(curve)) for sig in (b"rTRC", b"gTRC", b"bTRC")]
    return _profile(b"RGB ", tags)


def grey_profile(gamma: float) -> bytes:
    return _profile(b"GRAY", [(b"desc", _description(f"grey {gamma}")),
                              (b"wtpt", _xyz(D50)), (b"kTRC", _curve(gamma))])


def _decode_curve(values: np.ndarray, curve: float | str) -> np.ndarray:
    if curve != "srgb":
        return values ** curve
    return np.where(values <= 0.04045, values / 12.92, ((values + 0.055) / 1.055) ** 2.4)


def srgb_encode(linear: np.ndarray) -> np.ndarray:
    linear = np.clip(linear, 0.0, 1.0)
    return np.where(linear <= 0.0031308, linear * 12.92, 1.055 * linear ** (1 / 2.4) - 0.055)


def to_srgb_reference(rgb: np.ndarray, name: str) -> np.ndarray:
    """uint8 RGB in space `name` -> float sRGB values 0..255 (relative colorimetric, clipped)."""
    primaries, white, curve = SPACES[name]
    linear = _decode_curve(rgb.astype(np.float64) / 255, curve)
    xyz = linear @ rgb_to_xyz_d50(primaries, white).T
    srgb_linear = xyz @ np.linalg.inv(rgb_to_xyz_d50(SRGB_PRIMARIES, D65)).T
    return srgb_encode(srgb_linear) * 255


def lab(rgb: np.ndarray) -> np.ndarray:
    """sRGB values 0..255 -> CIELAB (D50), for colour differences (CIE76 delta E)."""
    linear = _decode_curve(np.clip(rgb, 0, 255) / 255, "srgb")
    xyz = linear @ rgb_to_xyz_d50(SRGB_PRIMARIES, D65).T / D50
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]),
                     200 * (f[..., 1] - f[..., 2])], axis=-1)
