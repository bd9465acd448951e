"""Decoded pixels of any mode to the RGB values the photo shows: colour managed to sRGB.

An embedded ICC profile says what the stored values mean; they are converted to sRGB with
LittleCMS (Pillow's ImageCms), so a photo tagged Adobe RGB, Display P3 or ProPhoto keeps its
colours. A file without a profile is taken as sRGB. With `keep_icc`, RGB values stay as stored
and the profile travels with them instead (a grey or CMYK profile cannot describe RGB pixels, so
those are still converted). Transparency is composited onto white, after the colour conversion.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, features

from preprocess.rejects import RejectedImage

_WHITE = (255, 255, 255)
_COLOUR_MODES = {"RGB": "RGB ", "L": "GRAY", "CMYK": "CMYK"}  # PIL mode -> ICC colour space
_ALPHA_MODES = {"RGBA": "RGB", "LA": "L", "PA": "RGB", "RGBa": "RGB", "La": "L"}
_HIGH_DEPTH = ("I;16", "I;16B", "I;16L", "I;16N", "I", "F")
_TRANSFORMS: dict[tuple[bytes, str], object] = {}  # per process: a photo set has few profiles
_MAX_TRANSFORMS = 32
NO_LCMS = ("this PIL build has no LittleCMS (see `datapipe doctor`; `bash tools/setup.sh` "
           "rebuilds it with it); --keep-icc stores values with their profile instead")


def colour_management_available() -> bool:
    return bool(features.check("littlecms2"))


def to_srgb(image: Image.Image, icc: bytes | None,
            keep_icc: bool) -> tuple[Image.Image, bytes | None]:
    """(RGB image, the profile to store with it or None). `image` is decoded, any mode."""
    colour, alpha = _split_alpha(_to_eight_bits(image))
    space = _profile_space(icc) if icc else None
    if space is None or (keep_icc and space == "RGB "):
        rgb, kept = _as_rgb(colour), icc if space else None
    else:
        rgb, kept = _converted(colour, icc, space), None
    return (_on_white(rgb, alpha) if alpha is not None else rgb), kept


def _as_rgb(image: Image.Image) -> Image.Image:
    return image if image.mode == "RGB" else image.convert("RGB")  # convert() would copy


def _profile_space(icc: bytes) -> str:
    """The data colour space in the profile's header (bytes 16-20), read without LittleCMS."""
    space = icc[16:20].decode("latin-1") if len(icc) >= 128 else ""
    if space not in _COLOUR_MODES.values():
        raise RejectedImage(f"embedded ICC profile is unusable (colour space {space!r}; "
                            "expected RGB, GRAY or CMYK)")
    return space


def _converted(colour: Image.Image, icc: bytes, space: str) -> Image.Image:
    if not colour_management_available():
        raise RejectedImage(f"embedded ICC profile cannot be converted to sRGB: {NO_LCMS}")
    mode = next(m for m, s in _COLOUR_MODES.items() if s == space)
    if colour.mode != mode:
        if {colour.mode, mode} != {"RGB", "L"}:  # grey pixels with an RGB profile, or back
            raise RejectedImage(f"embedded ICC profile is for {space.strip()}, but the pixels "
                                f"are {colour.mode}")
        colour = colour.convert(mode)
    from PIL import ImageCms

    try:
        return ImageCms.applyTransform(colour, _transform(icc, mode))
    except ImageCms.PyCMSError as exc:
        raise RejectedImage(f"embedded ICC profile is unusable: {exc}") from None


def _transform(icc: bytes, mode: str) -> object:
    from PIL import ImageCms

    key = (icc, mode)
    if key not in _TRANSFORMS:
        if len(_TRANSFORMS) >= _MAX_TRANSFORMS:
            _TRANSFORMS.clear()
        source = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        _TRANSFORMS[key] = ImageCms.buildTransform(source, ImageCms.createProfile("sRGB"),
                                                   mode, "RGB")
    return _TRANSFORMS[key]


def _split_alpha(image: Image.Image) -> tuple[Image.Image, Image.Image | None]:
    """The colour part (L, RGB, CMYK or another PIL mode) and the alpha channel, if any."""
    if image.mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    elif image.mode in ("1", "YCbCr", "LAB", "HSV"):
        image = image.convert("RGB" if image.mode != "1" else "L")
    if image.mode in _ALPHA_MODES:
        straight = image.convert("RGBA" if _ALPHA_MODES[image.mode] == "RGB" else "LA")
        return straight.convert(_ALPHA_MODES[image.mode]), straight.getchannel("A")
    return image, None


def _on_white(rgb: Image.Image, alpha: Image.Image) -> Image.Image:
    background = Image.new("RGB", rgb.size, _WHITE)
    background.paste(rgb, mask=alpha)
    return background


def _to_eight_bits(image: Image.Image) -> Image.Image:
    """High-depth grey to L, scaled by the depth the file declares, never by its content."""
    if image.mode not in _HIGH_DEPTH:
        return image
    pixels = np.asarray(image)
    if image.mode == "F":
        scaled = np.clip(pixels, 0, 255)
    else:
        scaled = pixels.astype(np.float64) * (255.0 / ((1 << _bit_depth(image)) - 1))
    return Image.fromarray(np.clip(np.rint(scaled), 0, 255).astype(np.uint8))


def _bit_depth(image: Image.Image) -> int:
    """16 for the I;16 modes and for mode I from PNG or PPM (PIL widens those to 16 bits);
    a TIFF's BitsPerSample otherwise."""
    if image.mode.startswith("I;16"):
        return 16
    tags = getattr(image, "tag_v2", None)
    bits = tags.get(258) if tags is not None else None
    if isinstance(bits, tuple):
        bits = bits[0] if bits else None
    return int(bits) if bits and 1 <= int(bits) <= 32 else 16
