"""Turn one stored image file into what the loader wants: oriented RGB at the target size.

Runs in conversion workers. Everything here is deterministic, so the same input gives the same
bytes every run.
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
from PIL import Image, ImageOps

from datapipe.errors import ArgumentError
from datapipe.image.cpu_decode import decode_region

ENCODINGS = ("jpeg", "raw")
# PIL's decompression-bomb threshold (Image.MAX_IMAGE_PIXELS): about 0.25 GiB of RGBA pixels.
DEFAULT_MAX_PIXELS = 89_478_485
JPEG_MAX_SIDE = 65_500  # libjpeg's JPEG_MAX_DIMENSION
_ORIENTATION = 0x0112
_TRANSPOSE = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
              4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE,
              6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
              8: Image.Transpose.ROTATE_90}
_WHITE = (255, 255, 255)


@dataclass(frozen=True)
class ImageSettings:
    short_side: int = 256
    quality: int = 90
    encoding: str = "jpeg"
    max_pixels: int = DEFAULT_MAX_PIXELS

    def __post_init__(self) -> None:
        if not 0 <= self.short_side <= 16384:
            raise ArgumentError(f"--short-side: {self.short_side} is out of range (0 to 16384)")
        if not 1 <= self.quality <= 100:
            raise ArgumentError(f"--quality: {self.quality} is out of range (1 to 100)")
        if self.encoding not in ENCODINGS:
            raise ArgumentError(f"--encoding: {self.encoding!r} is not one of {ENCODINGS}")
        if self.max_pixels < 1:
            raise ArgumentError(f"--max-pixels: must be positive, got {self.max_pixels}")


class RejectedImage(Exception):
    """The file cannot become a sample; the message is the reason listed in rejects.jsonl."""


def target_size(width: int, height: int, short_side: int) -> tuple[int, int]:
    if not short_side:
        return width, height
    scale = short_side / min(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def prepare_image(data: bytes | BinaryIO, settings: ImageSettings) -> tuple[bytes, int, int]:
    """Decode, orient, make RGB, resize, encode. Returns (payload, height, width).

    `data` is the file's bytes or the open file: an input that is not an image, or whose size
    (stored or resized) is over budget, is rejected after reading its header alone.
    """
    stream = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data
    with _pixel_limit_checked_here():
        image = _open(stream)
        _check_size(image.size, settings)
        try:
            image = _decode(image, stream, settings.short_side)
        except Exception as exc:  # any decoder failure on untrusted bytes is a reject
            raise RejectedImage(f"cannot decode: {type(exc).__name__}: {exc}") from None
    # From the decoded image: it may be oriented, or DCT-scaled with its own rounding.
    width, height = target_size(image.width, image.height, settings.short_side)
    if (width, height) != image.size:
        image = image.resize((width, height), Image.Resampling.BICUBIC)
    if settings.encoding == "raw":
        return image.tobytes(), height, width
    buffer = io.BytesIO()
    try:
        image.save(buffer, "JPEG", quality=settings.quality)
    except (OSError, ValueError) as exc:  # the header checks should leave nothing to fail
        raise RejectedImage(f"cannot encode {width}x{height} as JPEG: {exc}") from None
    return buffer.getvalue(), height, width


@contextlib.contextmanager
def _pixel_limit_checked_here() -> Iterator[None]:
    """PIL's decompression-bomb limit off while --max-pixels, checked here, stands in for it
    (PIL checks in open() and in some plugins' load(); a raised --max-pixels must hold there)."""
    limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
    try:
        yield
    finally:
        Image.MAX_IMAGE_PIXELS = limit


def _open(stream: BinaryIO) -> Image.Image:
    """Parse the header only: no pixels are read yet."""
    if not stream.read(1):
        raise RejectedImage("empty file")
    stream.seek(0)
    try:
        return Image.open(stream)
    except Image.UnidentifiedImageError:
        raise RejectedImage("not an image in a format PIL can read") from None
    except Exception as exc:  # a garbled header: any parser failure is a reject
        raise RejectedImage(f"cannot decode: {type(exc).__name__}: {exc}") from None


def _check_size(stored: tuple[int, int], settings: ImageSettings) -> None:
    """Refuse what would not fit before a pixel is allocated, from the header's size (the
    target of an oriented image is the same, transposed)."""
    resized = target_size(*stored, settings.short_side)
    for what, (w, h) in (("stored", stored), ("resized", resized)):
        if w * h > settings.max_pixels:
            raise RejectedImage(f"{what} size {w}x{h} is {w * h:,} pixels, over --max-pixels "
                                f"{settings.max_pixels:,}")
    if settings.encoding == "jpeg" and max(resized) > JPEG_MAX_SIDE:
        raise RejectedImage(f"resized size {resized[0]}x{resized[1]}: JPEG allows at most "
                            f"{JPEG_MAX_SIDE:,} pixels a side (--encoding raw has no such limit)")


def _decode(image: Image.Image, stream: BinaryIO, short_side: int) -> Image.Image:
    """Decoded, oriented RGB from an opened image. JPEG pixels come at reduced scale when the
    target allows (DCT scaling: 1/2, 1/4 or 1/8, as PIL's draft would pick)."""
    denom = _dct_scale(image.size, short_side) if image.format == "JPEG" else 1
    if decode_region is not None and image.format == "JPEG" and image.mode in ("RGB", "L"):
        # libjpeg-turbo straight to packed RGB: the same pixels as PIL, at half its overhead.
        stream.seek(0)
        data = stream.read()
        try:
            rgb, width, height, _, _ = decode_region(data, 0, 0, 1 << 30, 1 << 30, denom)
        except ValueError:
            pass  # corrupt or unusual: PIL below decides, and names the problem
        else:
            decoded = Image.frombuffer("RGB", (width, height), rgb, "raw", "RGB", 0, 1)
            method = _TRANSPOSE.get(image.getexif().get(_ORIENTATION, 1))
            return decoded.transpose(method) if method is not None else decoded
    if denom > 1:
        image.draft(image.mode, (image.width // denom, image.height // denom))
    image.load()
    return _to_rgb(ImageOps.exif_transpose(image))


def _dct_scale(size: tuple[int, int], short_side: int) -> int:
    """The largest of 1, 2, 4, 8 that still leaves the shorter side >= short_side."""
    if not short_side:
        return 1
    scale = short_side / min(size)
    if scale >= 0.5:
        return 1
    want = (math.ceil(size[0] * scale), math.ceil(size[1] * scale))
    fit = min(size[0] // want[0], size[1] // want[1])
    return next(d for d in (8, 4, 2, 1) if d <= fit)


def _to_rgb(image: Image.Image) -> Image.Image:
    """Any mode to RGB; transparency is composited onto white rather than turned black."""
    if image.mode == "RGB":
        return image
    if image.mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    if image.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        image = _high_depth_to_l(image)
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, _WHITE)
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return image.convert("RGB")


def _high_depth_to_l(image: Image.Image) -> Image.Image:
    pixels = np.asarray(image)
    if image.mode == "F":
        scaled = np.clip(pixels, 0, 255)
    else:
        top = 65535 if pixels.max(initial=0) > 255 else 255
        scaled = pixels.astype(np.float64) * (255.0 / top)
    return Image.fromarray(np.rint(scaled).astype(np.uint8))
