"""What this environment runs datapipe with: the PIL build, decoders, devices."""

from __future__ import annotations

import io
from importlib import metadata
from typing import Any

# (name, PIL format, save options, Debian package with the headers pillow-simd needs for it):
# what photo datasets hold. Each is probed by writing and reading back a tiny image, so the
# answer is what this PIL build really does.
FORMAT_PROBES = (
    ("JPEG", "JPEG", {}, "libjpeg-dev"), ("PNG", "PNG", {}, "zlib1g-dev"),
    ("GIF", "GIF", {}, ""), ("BMP", "BMP", {}, ""), ("PPM", "PPM", {}, ""),
    ("WebP", "WEBP", {}, "libwebp-dev"), ("TIFF", "TIFF", {}, ""),
    ("TIFF (deflate)", "TIFF", {"compression": "tiff_adobe_deflate"}, "libtiff-dev"),
    ("TIFF (LZW)", "TIFF", {"compression": "tiff_lzw"}, "libtiff-dev"),
    ("AVIF", "AVIF", {}, "libavif-dev"))
# Missing, these are only noted: pillow needs libavif >= 1.0, which Debian 12 does not ship.
OPTIONAL_FORMATS = ("AVIF",)
LCMS_PACKAGE = "liblcms2-dev"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def pil_build() -> dict[str, Any]:
    """Which distribution provides `PIL`: pillow-simd and pillow install into the same package,
    and a later pillow install silently replaces the SIMD build."""
    import PIL
    from PIL import features

    simd, plain = _version("pillow-simd"), _version("pillow")
    if simd and not plain:
        build = "pillow-simd"
    elif plain and not simd:
        build = "pillow"
    else:
        build = "ambiguous: both pillow and pillow-simd are installed" if simd else "unknown"
    return {"build": build, "version": PIL.__version__,
            "libjpeg_turbo": bool(features.check_feature("libjpeg_turbo")),
            "littlecms2": bool(features.check("littlecms2")), "formats": readable_formats()}


def readable_formats() -> dict[str, bool]:
    """For each of FORMAT_PROBES, whether the active PIL reads it."""
    return {name: _round_trips(fmt, options) for name, fmt, options, _ in FORMAT_PROBES}


def missing_support(pil: dict[str, Any]) -> dict[str, str]:
    """What a photo set may need that this PIL lacks (optional formats aside), each with the
    Debian package whose headers pillow-simd must be built with."""
    packages = {name: package for name, _, _, package in FORMAT_PROBES}
    missing = {name: packages[name] for name, ok in pil["formats"].items()
               if not ok and name not in OPTIONAL_FORMATS}
    if not pil["littlecms2"]:
        missing["colour profiles (LittleCMS)"] = LCMS_PACKAGE
    return missing


def _round_trips(fmt: str, options: dict[str, Any]) -> bool:
    from PIL import Image

    buffer = io.BytesIO()
    try:
        Image.new("RGB", (4, 4), (200, 30, 60)).save(buffer, fmt, **options)
        buffer.seek(0)
        with Image.open(buffer) as image:
            image.load()
            return image.size == (4, 4)
    except Exception:  # a missing codec shows up as any of KeyError, OSError, ImportError...
        return False


def environment() -> dict[str, Any]:
    from datapipe.image.cpu_decode import extension_status

    info: dict[str, Any] = {"datapipe": _version("datapipe"), "PIL": pil_build(),
                            "JPEG extension": extension_status()}
    for dist in ("torch", "pyarrow", "nvidia-dali-cuda130", "kornia", "tokenizers"):
        info[dist] = _version(dist) or "not installed"
    try:
        import torch

        info["cuda"] = torch.cuda.is_available()
    except ImportError:
        info["cuda"] = False
    return info
