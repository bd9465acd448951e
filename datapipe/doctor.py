"""What this environment runs datapipe with: the PIL build, decoders, devices."""

from __future__ import annotations

from importlib import metadata
from typing import Any


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
            "libjpeg_turbo": bool(features.check_feature("libjpeg_turbo"))}


def environment() -> dict[str, Any]:
    info: dict[str, Any] = {"datapipe": _version("datapipe"), "PIL": pil_build()}
    for dist in ("torch", "pyarrow", "nvidia-dali-cuda130", "kornia", "tokenizers"):
        info[dist] = _version(dist) or "not installed"
    try:
        import torch

        info["cuda"] = torch.cuda.is_available()
    except ImportError:
        info["cuda"] = False
    return info
