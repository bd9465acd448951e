"""Turn one stored image file into what the loader wants: sRGB at the target size, oriented.

Runs in conversion workers. Everything here is deterministic, so the same input gives the same
bytes every run. Sizes are checked from the header before a pixel is decoded; colour is in
preprocess.image_colour, size and placement in preprocess.image_geometry.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from PIL import Image

from datapipe.errors import ArgumentError
from datapipe.image.cpu_decode import decode_region
from preprocess.image_colour import to_srgb
from preprocess.image_geometry import (
    dct_scale,
    orientation_of,
    oriented,
    resize_and_orient,
    target_size,
)
from preprocess.rejects import RejectedImage

__all__ = ["ImageSettings", "RejectedImage", "prepare_image", "target_size"]

ENCODINGS = ("jpeg", "raw")
SUBSAMPLINGS = ("4:4:4", "4:2:2", "4:2:0")
# PIL's decompression-bomb threshold (Image.MAX_IMAGE_PIXELS): about 0.25 GiB of RGBA pixels.
DEFAULT_MAX_PIXELS = 89_478_485
JPEG_MAX_SIDE = 65_500  # libjpeg's JPEG_MAX_DIMENSION


@dataclass(frozen=True)
class ImageSettings:
    short_side: int = 256
    quality: int = 90
    encoding: str = "jpeg"
    max_pixels: int = DEFAULT_MAX_PIXELS
    subsampling: str = "4:2:0"
    upscale: bool = True  # as torchvision's Resize: a smaller image is enlarged
    keep_icc: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.short_side <= 16384:
            raise ArgumentError(f"--short-side: {self.short_side} is out of range (0 to 16384)")
        if not 1 <= self.quality <= 100:
            raise ArgumentError(f"--quality: {self.quality} is out of range (1 to 100)")
        if self.encoding not in ENCODINGS:
            raise ArgumentError(f"--encoding: {self.encoding!r} is not one of {ENCODINGS}")
        if self.max_pixels < 1:
            raise ArgumentError(f"--max-pixels: must be positive, got {self.max_pixels}")
        if self.subsampling not in SUBSAMPLINGS:
            raise ArgumentError(f"--subsampling: {self.subsampling!r} is not one of "
                                f"{SUBSAMPLINGS}")
        if self.keep_icc and self.encoding == "raw":
            raise ArgumentError("--keep-icc: raw pixels cannot carry a profile; use "
                                "--encoding jpeg, or leave colours converted to sRGB")

    def record(self) -> dict[str, Any]:
        """The settings as the manifest (and the resume fingerprint) records them."""
        return {"short_side": self.short_side, "quality": self.quality,
                "encoding": self.encoding, "max_pixels": self.max_pixels,
                "subsampling": self.subsampling, "upscale": self.upscale,
                "colour": "keep-icc" if self.keep_icc else "srgb"}


def prepare_image(data: bytes | BinaryIO, settings: ImageSettings) -> tuple[bytes, int, int]:
    """Decode, make sRGB, resize, orient, encode. Returns (payload, height, width).

    `data` is the file's bytes or the open file: an input that is not an image, or whose size
    (stored or resized) is over budget, is rejected after reading its header alone.
    """
    stream = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data
    with _pixel_limit_checked_here():
        image = _open(stream)
        orientation = _header_orientation(image)
        stored = image.size
        target = target_size(*stored, settings.short_side, settings.upscale)
        _check_size(oriented(stored, orientation), oriented(target, orientation), settings)
        try:
            decoded, scale = _decode(image, stream, target)
            rgb, icc = to_srgb(decoded, image.info.get("icc_profile"), settings.keep_icc)
        except RejectedImage:
            raise
        except Exception as exc:  # any decoder failure on untrusted bytes is a reject
            raise RejectedImage(f"cannot decode: {type(exc).__name__}: {exc}") from None
    final = resize_and_orient(rgb, scale, stored, target, orientation)
    return _encode(final, settings, icc), final.height, final.width


def _encode(image: Image.Image, settings: ImageSettings, icc: bytes | None) -> bytes:
    if settings.encoding == "raw":
        return image.tobytes()
    buffer = io.BytesIO()
    extra = {"icc_profile": icc} if icc else {}
    try:
        image.save(buffer, "JPEG", quality=settings.quality, subsampling=settings.subsampling,
                   **extra)
    except (OSError, ValueError) as exc:  # the header checks should leave nothing to fail
        raise RejectedImage(f"cannot encode {image.width}x{image.height} as JPEG: "
                            f"{exc}") from None
    return buffer.getvalue()


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


def _header_orientation(image: Image.Image) -> int:
    try:
        return orientation_of(image)
    except Exception as exc:  # garbled EXIF on untrusted bytes
        raise RejectedImage(f"cannot read its EXIF: {type(exc).__name__}: {exc}") from None


def _check_size(stored: tuple[int, int], output: tuple[int, int],
                settings: ImageSettings) -> None:
    """Refuse what would not fit before a pixel is allocated: the stored size and the final,
    oriented output size (upscaling choice included), as the header gives them."""
    for what, (w, h) in (("stored", stored), ("resized", output)):
        if w * h > settings.max_pixels:
            raise RejectedImage(f"{what} size {w}x{h} is {w * h:,} pixels, over --max-pixels "
                                f"{settings.max_pixels:,}")
    if settings.encoding == "jpeg" and max(output) > JPEG_MAX_SIDE:
        raise RejectedImage(f"resized size {output[0]}x{output[1]}: JPEG allows at most "
                            f"{JPEG_MAX_SIDE:,} pixels a side (--encoding raw has no such limit)")


def _decode(image: Image.Image, stream: BinaryIO,
            target: tuple[int, int]) -> tuple[Image.Image, int]:
    """(pixels in stored orientation, the scale they were decoded at). JPEG comes at 1/2, 1/4
    or 1/8 scale when the target allows; other formats at full size."""
    if image.format != "JPEG":
        image.load()
        return image, 1
    scale = dct_scale(image.size, target)
    if decode_region is not None and image.mode in ("RGB", "L"):
        # libjpeg-turbo straight to packed RGB: the same pixels as PIL, at half its overhead.
        stream.seek(0)
        try:
            rgb, width, height, _, _ = decode_region(stream.read(), 0, 0, 1 << 30, 1 << 30,
                                                     scale)
        except ValueError:
            pass  # corrupt or unusual: PIL below decides, and names the problem
        else:
            return Image.frombuffer("RGB", (width, height), rgb, "raw", "RGB", 0, 1), scale
    if scale > 1:
        stored = image.size
        drafted = image.draft(image.mode, (stored[0] // scale, stored[1] // scale))
        scale = round(stored[0] / drafted[1][2]) if drafted else 1
    image.load()
    return image, scale

