"""Turn one stored image file into what the loader wants: oriented RGB at the target size.

Runs in conversion workers. Everything here is deterministic, so the same input gives the same
bytes every run.
"""

from __future__ import annotations

import io
import math
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps

from datapipe.errors import ArgumentError

ENCODINGS = ("jpeg", "raw")
_WHITE = (255, 255, 255)


@dataclass(frozen=True)
class ImageSettings:
    short_side: int = 256
    quality: int = 90
    encoding: str = "jpeg"

    def __post_init__(self) -> None:
        if not 0 <= self.short_side <= 16384:
            raise ArgumentError(f"--short-side: {self.short_side} is out of range (0 to 16384)")
        if not 1 <= self.quality <= 100:
            raise ArgumentError(f"--quality: {self.quality} is out of range (1 to 100)")
        if self.encoding not in ENCODINGS:
            raise ArgumentError(f"--encoding: {self.encoding!r} is not one of {ENCODINGS}")


class RejectedImage(Exception):
    """The file cannot become a sample; the message is the reason listed in rejects.jsonl."""


def target_size(width: int, height: int, short_side: int) -> tuple[int, int]:
    if not short_side:
        return width, height
    scale = short_side / min(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def prepare_image(data: bytes, settings: ImageSettings) -> tuple[bytes, int, int]:
    """Decode, orient, make RGB, resize, encode. Returns (payload, height, width)."""
    if not data:
        raise RejectedImage("empty file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = _decode(data, settings.short_side)
            image = _to_rgb(ImageOps.exif_transpose(image))
    except RejectedImage:
        raise
    except Image.UnidentifiedImageError:
        raise RejectedImage("not an image in a format PIL can read") from None
    except Exception as exc:  # any decoder failure on untrusted bytes is a reject, not a crash
        raise RejectedImage(f"cannot decode: {type(exc).__name__}: {exc}") from None
    width, height = target_size(image.width, image.height, settings.short_side)
    if (width, height) != image.size:
        image = image.resize((width, height), Image.Resampling.BICUBIC)
    if settings.encoding == "raw":
        return image.tobytes(), height, width
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=settings.quality)
    return buffer.getvalue(), height, width


def _decode(data: bytes, short_side: int) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    if image.format == "JPEG" and short_side:
        # DCT-domain scaling: libjpeg decodes straight to 1/2, 1/4 or 1/8 size when the result
        # still covers the target, skipping most of the IDCT work and the resize input.
        scale = short_side / min(image.size)
        if scale < 0.5:
            want = (math.ceil(image.width * scale), math.ceil(image.height * scale))
            image.draft(image.mode, want)
    image.load()
    return image


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
