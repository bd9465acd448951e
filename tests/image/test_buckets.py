"""Bucket sets (given sizes, kohya's resolutions), their bad arguments in one line, the
assignment of each image by its stored size, and the bucket index kept beside the dataset."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

import datapipe as dp
from datapipe.errors import ArgumentError
from datapipe.format import Dataset
from datapipe.format.stamped_files import mapped_file
from datapipe.image.bucket_index import PREFIX, bucket_index
from datapipe.image.buckets import Buckets, plan_cover_crops
from tests.format.test_scalar_maps import _without_write_access
from tests.imagegen import jpeg_bytes, noise_image


def _kohya_reference(area: int, step: int, low: int, high: int) -> set[tuple[int, int]]:
    """sd-scripts' make_bucket_resolutions, as (width, height) pairs."""
    found = {(int(math.sqrt(area) // step) * step,) * 2}
    width = low
    while width <= high:
        height = min(high, int((area // width) // step) * step)
        if height >= low:
            found |= {(width, height), (height, width)}
        width += step
    return found


def test_kohya_buckets_are_sd_scripts_resolutions() -> None:
    buckets = Buckets.kohya(area=1024 ** 2, step=64, min_side=512, max_side=2048)
    assert {(w, h) for h, w in buckets.sizes} == _kohya_reference(1024 ** 2, 64, 512, 2048)
    assert all(h * w <= 1024 ** 2 for h, w in buckets.sizes)
    assert dp.image.Buckets is Buckets


@pytest.mark.parametrize(("make", "named"), [
    (lambda: Buckets.of([]), "sizes is empty"),
    (lambda: Buckets.of([(512, 500)]), "(512, 500) has a side that is not a multiple of step=64"),
    (lambda: Buckets.of([(0, 64)]), "(0, 64) has a side below 1"),
    (lambda: Buckets.of([(-64, 64)]), "(-64, 64) has a side below 1"),
    (lambda: Buckets.of([(64, 64), (64, 64)]), "(64, 64) is given twice"),
    (lambda: Buckets.of([(64, 64)], step=0), "step must be a positive integer, got 0"),
    (lambda: Buckets.of("64x64"), "sizes must be a list"),
    (lambda: Buckets.of([(64, 64)], crop="middle"), "crop must be one of"),
    (lambda: Buckets.of([(64, 64)], max_pixels=0), "max_pixels must be a positive integer"),
    (lambda: Buckets.of([(64, 64)], max_aspect_error=float("nan")), "max_aspect_error"),
    (lambda: Buckets.kohya(min_side=1024, max_side=512), "min_side 1024 is above max_side 512"),
])
def test_bad_bucket_sets_are_refused_in_one_line_naming_the_value(make, named: str) -> None:
    with pytest.raises(ArgumentError) as error:
        make()
    assert named in str(error.value) and "\n" not in str(error.value)


def test_each_image_goes_to_the_nearest_ratio_ties_to_the_larger_area_then_the_first() -> None:
    buckets = Buckets.of([(64, 128), (128, 256), (128, 128), (128, 64)])
    chosen, error = buckets.assign(np.array([50, 100, 120, 300, 200]),
                                   np.array([100, 100, 100, 100, 90]))
    assert chosen.tolist() == [1, 2, 2, 3, 3]  # 1:2 twice: the larger (128, 256)
    assert error[0] == pytest.approx(0) and error[3] == pytest.approx(math.log(3 / 2))
    assert Buckets.of([(64, 64), (128, 128)]).assign(np.array([9]), np.array([9]))[0] == [1]
    assert buckets.batch_sizes(7) == (7,) * 4
    assert Buckets.of([(64, 64), (128, 128)], max_pixels=64 * 64 * 5).batch_sizes(7) == (5, 1)


def test_a_cover_crop_covers_the_bucket_and_stays_inside_the_image() -> None:
    rng = np.random.default_rng(0)
    h, w = rng.integers(20, 900, 500), rng.integers(20, 900, 500)
    flips = rng.random(500) < 0.5
    for crop in ("random", "center"):
        boxes, corner = plan_cover_crops((128, 192), h, w, crop, flips, rng)
        x0, y0, bw, bh = boxes.T
        assert (x0 >= 0).all() and (y0 >= 0).all() and (x0 + bw <= w).all() \
            and (y0 + bh <= h).all()
        assert ((bw == w) | (bh == h)).all()  # one side whole: the image covers the bucket
        assert (corner >= 0).all()


def _write(path: Path, sizes: list[tuple[int, int]]) -> Path:
    with dp.DatasetWriter(path, {"image": "jpeg", "label": "int64"}) as writer:
        for i, (h, w) in enumerate(sizes):
            writer.write({"image": jpeg_bytes(noise_image(w, h, i)), "label": i})
    return path


def test_the_bucket_index_is_built_once_beside_the_dataset_and_mapped(tmp_path: Path) -> None:
    sizes = [(64, 128), (128, 64), (96, 96), (60, 200), (130, 60), (100, 98)] * 5
    path = _write(tmp_path / "ds", sizes)
    buckets = Buckets.of([(64, 128), (128, 64), (64, 64)], max_aspect_error=0.3)
    with Dataset(path) as ds:
        index = bucket_index(ds, buckets)
        assert mapped_file(index.ids) is not None
        chosen, _ = buckets.assign(np.array([h for h, _ in sizes]),
                                   np.array([w for _, w in sizes]))
        for k in range(3):  # each bucket's ids, in id order
            assert index.ids[index.offsets[k]:index.offsets[k + 1]].tolist() == \
                np.flatnonzero(chosen == k).tolist()
        assert index.summary.far == 5  # 60 x 200 is 1:3.3, log 0.51 from 1:2
        files = sorted(p.name for p in path.glob(f"{PREFIX}*.npy"))
        assert len(files) == 1
        stamp = os.stat(path / files[0]).st_mtime_ns
        again = bucket_index(ds, buckets)
        assert again.ids.tolist() == index.ids.tolist()
        assert os.stat(path / files[0]).st_mtime_ns == stamp  # mapped, not rebuilt


def test_a_damaged_index_is_rebuilt_and_a_read_only_folder_keeps_it_private(
        tmp_path: Path) -> None:
    path = _write(tmp_path / "ds", [(64, 128), (128, 64), (96, 96)] * 3)
    buckets = Buckets.of([(64, 128), (128, 64)])
    with Dataset(path) as ds:
        want = bucket_index(ds, buckets).ids.tolist()
    saved = next(path.glob(f"{PREFIX}*.npy"))
    data = bytearray(saved.read_bytes())
    data[-1] ^= 0xFF
    saved.write_bytes(bytes(data))
    with Dataset(path) as ds:
        assert bucket_index(ds, buckets).ids.tolist() == want
    for p in path.glob(f"{PREFIX}*"):
        p.unlink()
    def read() -> tuple[list[int], bool]:
        with Dataset(path) as ds:
            index = bucket_index(ds, buckets)
        return index.ids.tolist(), mapped_file(index.ids) is not None

    path.chmod(0o555)
    try:
        assert _without_write_access(path, read) == (want, False)
    finally:
        path.chmod(0o755)
