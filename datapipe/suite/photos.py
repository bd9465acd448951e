"""The suite's photos: an ImageFolder tree of realistic JPEG photos.

    OUT/class_00/photo_000000.jpg, OUT/class_01/photo_000001.jpg, ...

Every photo is a random crop of a real source photograph (see photo_sources), rescaled to a
web-photo size, randomly flipped and colour-shifted, and saved as a baseline 4:2:0 JPEG. Same
arguments give byte-identical files. Needs only numpy and PIL; `tools/make_photos.py` is its
command line.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from multiprocessing import Pool
from pathlib import Path

import numpy as np
from PIL import Image

from datapipe.suite.photo_sources import DEFAULT_CACHE, load_sources

# How a photo is cut from its source.
MIN_CROP_FRACTION = 0.5  # crop side relative to the largest crop of the target aspect ratio
MAX_UPSCALE = 1.5  # sources are small; beyond this, crops get visibly soft
MAX_ASPECT = 4 / 3  # width/height is drawn log-uniformly in [1/MAX_ASPECT, MAX_ASPECT]
QUALITY_RANGE = (75, 95)

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
