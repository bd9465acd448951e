"""Photo-like images of many sizes and aspect ratios, converted at their own size, for the
patch loader's tests."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from datapipe.suite.photo_sources import procedural_photo
from tests.conftest import convert

# (width, height): ordinary photos, both orientations, beyond Qwen2-VL's max_pixels (a reduced
# DCT-scale decode), thin strips up to 166:1 (Qwen2-VL's processor refuses beyond 200:1),
# below its min_pixels, and smaller than one patch.
SIZES = [(640, 480), (480, 640), (1024, 1024), (2000, 1500), (1600, 200), (200, 1600),
         (3000, 60), (60, 3000), (5000, 30), (40, 30), (13, 9), (333, 517)]


def make_photos(folder: Path, sizes: list[tuple[int, int]], seed: int = 0) -> Path:
    """An image folder of one class, photo_<i>.jpg of sizes[i] (JPEG q92, 4:2:0)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, (w, h) in enumerate(sizes):
        photo = procedural_photo(np.random.default_rng([seed, i]), w, h)
        photo.save(folder / f"photo_{i:03d}.jpg", quality=92)
    return folder.parent


def make_patch_dataset(root: Path, sizes: list[tuple[int, int]] = SIZES,
                       seed: int = 0) -> Path:
    """The images converted at their own size (no resize at convert)."""
    src = make_photos(root / "src" / "class_0", sizes, seed)
    convert("images", src, root / "out", "--short-side", "0")
    return root / "out"


def stored_image(dataset: Path, index: int) -> Image.Image:
    """Image `index` as PIL decodes the stored bytes: what a processor is fed."""
    from datapipe.format import Dataset

    with Dataset(dataset) as ds:
        shards, rows = ds.locate_many(np.array([index]))
        data = ds.shard(int(shards[0])).payload("image", int(rows[0])).tobytes()
    return Image.open(io.BytesIO(data)).convert("RGB")
