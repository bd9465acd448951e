"""CPU decode with the crop planned first: decode only the rows, columns and scale it needs.

With the C extension, one call per image decodes the crop's region (at 1/2^k DCT scale when the
crop is at least twice the output) and resamples it, flipped, straight into the batch buffer.
Without it, PIL decodes (with `draft` for the DCT scaling) and resizes. Either way the GIL is
released while pixels are processed.

Given a `table` (see `datapipe.image.normalize_table`), each channel's byte is written as the
table's value instead: normalised floats land in the batch buffer in the same pass, so the
process that hands batches to training never touches pixels.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image

from datapipe.errors import DataError
from datapipe.image.pixel_map import apply_table

try:  # the optional C extension: region decode and resample straight from libjpeg-turbo
    from datapipe.image._jpeg import crop_into, decode_region, whole_into
except ImportError as exc:  # built without libjpeg headers: PIL does all the decoding
    crop_into = decode_region = whole_into = None
    _EXTENSION_MISSING = str(exc)
else:
    _EXTENSION_MISSING = ""
EXTENSION_ACTIVE = crop_into is not None

SLOW_PATH_WARNING = (
    "datapipe's JPEG extension (datapipe.image._jpeg) is not built, so images decode through "
    "PIL, about half as fast; reinstall datapipe where libjpeg headers are present "
    "(`pip install -e .` in a source checkout builds it in place)")
_warned = False


def extension_status() -> str:
    """Which decode path `decode_into` takes, for `datapipe doctor` and benchmark reports."""
    if EXTENSION_ACTIVE:
        return "active (libjpeg-turbo region decode + SIMD resample)"
    return f"NOT built ({_EXTENSION_MISSING}): decode falls back to PIL, about 2x slower"


def warn_if_slow_path() -> None:
    """Warn once per process when the fast path is missing: a loader silently running at half
    speed is worse than a loud one."""
    global _warned
    if not EXTENSION_ACTIVE and not _warned:
        _warned = True
        warnings.warn(SLOW_PATH_WARNING, RuntimeWarning, stacklevel=3)

_RESAMPLE = Image.Resampling.BILINEAR
_VERIFY_HINT = " (a corrupt shard? `datapipe verify` re-hashes it)"


def decode_into(payload: bytes, encoding: str, height: int, width: int,
                box: np.ndarray, flip: bool, out: np.ndarray,
                table: np.ndarray | None = None) -> None:
    """Decode one stored image, crop `box` (x0, y0, w, h), resize to `out` (H, W, 3), flip.

    `out` is uint8, or with a 3 x 256 `table` of the table's dtype: out[y, x, c] is then
    table[c, byte]."""
    out_h, out_w = out.shape[:2]
    x0, y0, cw, ch = (int(v) for v in box)
    if encoding == "raw":
        if len(payload) != height * width * 3:
            raise DataError(f"raw image holds {len(payload)} bytes, expected {height}x{width}x3"
                            f"{_VERIFY_HINT}")
        if (cw, ch) == (out_w, out_h):
            pixels = np.frombuffer(payload, dtype=np.uint8).reshape(height, width, 3)
            region = pixels[y0:y0 + ch, x0:x0 + cw]
            _store(region[:, ::-1] if flip else region, out, table)
            return
        image = Image.frombuffer("RGB", (width, height), payload, "raw", "RGB", 0, 1)
    elif crop_into is not None and _region_into(payload, width, height, (x0, y0, cw, ch),
                                                    flip, out, table):
        return
    else:
        image = Image.open(io.BytesIO(payload))  # BytesIO shares a bytes object, no copy
        if image.size != (width, height):  # the crop was planned from the stored size
            raise DataError(f"the image is {image.width}x{image.height} pixels, but the "
                            f"shard's width and height say {width}x{height}{_VERIFY_HINT}")
        _reduced_decode(image, cw / out_w, ch / out_h)
        if image.mode != "RGB":
            image = image.convert("RGB")
    # A reduced decode rounds sizes up: scale each axis by its own factor, and clamp so float
    # error never puts the box outside the image.
    sx, sy = image.width / width, image.height / height
    crop = (x0 * sx, y0 * sy, min((x0 + cw) * sx, image.width), min((y0 + ch) * sy,
                                                                     image.height))
    full = (0, 0, image.width, image.height)
    if image.size == (out_w, out_h) and crop == full:
        resized = image
    else:
        resized = image.resize((out_w, out_h), _RESAMPLE, box=crop)
    if flip:  # PIL flips its own rows fast; a negative-stride numpy copy is 3x slower
        resized = resized.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    _store(np.asarray(resized), out, table)


def decode_whole_into(payload: bytes, encoding: str, height: int, width: int, flip: bool,
                      out: np.ndarray) -> None:
    """The whole stored image resized to `out` (H, W, 3 uint8), flipped if asked: what
    `decode_into` does with the image as its box, straight to the extension for a JPEG (the
    patch producer's call, once per image: no box to build and check)."""
    if encoding != "raw" and crop_into is not None:
        out_h, out_w = out.shape[:2]
        try:
            whole_into(payload, _scale_denom(min(width / out_w, height / out_h)), flip, out,
                       size=(width, height))
            return
        except ValueError:  # libjpeg declines: the general path uses PIL, or names why
            pass
    decode_into(payload, encoding, height, width, np.array([0, 0, width, height]), flip, out)


def _scale_denom(reduction: float) -> int:
    """The smallest 1/2^k DCT scale whose decode still covers an output `reduction` times
    smaller than the crop."""
    return 8 if reduction >= 8 else 4 if reduction >= 4 else 2 if reduction >= 2 else 1


def _store(pixels: np.ndarray, out: np.ndarray, table: np.ndarray | None) -> None:
    """uint8 H x W x 3 pixels into `out`, through `table` when there is one."""
    if table is None:
        out[:] = pixels
    else:
        apply_table(np.ascontiguousarray(pixels), table, out)


def _region_into(payload: bytes, width: int, height: int, box: tuple[int, int, int, int],
                 flip: bool, out: np.ndarray, table: np.ndarray | None) -> bool:
    """Decode only the crop's rows and iMCU columns, at the smallest 1/2^k scale that still
    covers the output, and resample straight into `out`. False when libjpeg declines (e.g.
    CMYK, or a JPEG whose size is not the stored one): the caller uses PIL, which names the
    problem."""
    x0, y0, cw, ch = box
    out_h, out_w = out.shape[:2]
    reduction = min(cw / out_w, ch / out_h)
    denom = _scale_denom(reduction)
    # A margin as wide as the resize filter's reach, so pixels at the crop's edge are filtered
    # from the same neighbours as in a full decode.
    margin = denom * (2 + int(reduction / denom))
    rx0, ry0 = max(0, x0 - margin), max(0, y0 - margin)
    rx1, ry1 = min(width, x0 + cw + margin), min(height, y0 + ch + margin)
    try:
        crop_into(payload, (rx0, ry0, rx1 - rx0, ry1 - ry0), denom,
                  (x0, y0, x0 + cw, y0 + ch), flip, out, size=(width, height), table=table)
    except ValueError:
        return False
    return True


def _reduced_decode(image: Image.Image, sx: float, sy: float) -> None:
    """Ask for a DCT-scaled decode when the crop is at least twice the output size."""
    reduction = min(sx, sy)
    if image.format == "JPEG" and reduction >= 2:
        # draft picks the largest 1/2^k scale whose result is still >= the requested size.
        image.draft("RGB", (int(image.width / reduction) + 1, int(image.height / reduction) + 1))
    image.load()
