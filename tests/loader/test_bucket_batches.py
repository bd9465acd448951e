"""Bucketed batches from real shards in real worker processes: every image in exactly one
bucket and once per epoch over 1, 2 and 3 ranks, every batch one bucket's size, SDXL's size
conditioning that reproduces the crop from the stored image, exact resume at every step (with
captions too) and at another world size, and what cannot be bucketed refused in one line."""

from __future__ import annotations

import collections
import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import datapipe as dp
from datapipe.errors import ArgumentError
from datapipe.format import Dataset
from tests.captions_data import caption, clip_style_tokenizer, write_captioned_tar
from tests.conftest import convert
from tests.imagegen import jpeg_bytes, noise_image
from tests.loader.helpers import check_resume_at_every_step, indices_of, run_world

# Stored sizes of every aspect: wide, tall, square, a panorama beyond any bucket's ratio.
SHAPES = [(64, 128), (128, 64), (96, 96), (60, 200), (130, 70), (100, 98), (80, 120)]
BUCKETS = dp.image.Buckets.of([(32, 64), (64, 32), (48, 48)], step=16, max_aspect_error=0.6)


def _write(path: Path, shapes: list[tuple[int, int]], smooth: bool = False) -> Path:
    with dp.DatasetWriter(path, {"image": "jpeg", "label": "int64"}) as writer:
        for i, (h, w) in enumerate(shapes):
            writer.write({"image": jpeg_bytes(_smooth(w, h, i) if smooth
                                              else noise_image(w, h, i), quality=95),
                          "label": i % 3})
    return path


def _smooth(width: int, height: int, seed: int) -> Image.Image:
    """Gradients without noise: two resampling paths of it agree to a few levels."""
    y, x = np.mgrid[0:height, 0:width]
    phase = seed * 0.7
    pixels = np.stack([127 + 120 * np.sin(x / width * 3 + phase + c) * np.cos(y / height * 2 + c)
                       for c in range(3)], axis=-1)
    return Image.fromarray(pixels.astype(np.uint8))


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("bk") / "ds", SHAPES * 5)


def darker(pixels: np.ndarray) -> np.ndarray:
    return pixels // 2


def _loader(path: Path, **kwargs: object) -> dp.Loader:
    kwargs = {"batch_size": 4, "num_workers": 2, "buckets": BUCKETS, **kwargs}
    return dp.Loader(path, **kwargs)


def _bucket_of(h: int, w: int) -> tuple[int, int]:
    k, _ = BUCKETS.assign(np.array([h]), np.array([w]))
    return BUCKETS.sizes[int(k[0])]


@pytest.mark.parametrize("world", [1, 2, 3])
def test_every_image_once_per_epoch_in_its_one_bucket_across_ranks(photos: Path,
                                                                   world: int) -> None:
    ranks, _ = run_world(lambda **kw: _loader(photos, seed=4, **kw), world, None, epoch=1)
    seen: collections.Counter[int] = collections.Counter()
    for batches in ranks:
        for batch in batches:
            n, _, h, w = batch["image"].shape
            assert n == 4 and batch["image"].dtype == torch.uint8
            for (oh, ow), target in zip(batch["original_size"].tolist(),
                                        batch["target_size"].tolist(), strict=True):
                assert _bucket_of(oh, ow) == tuple(target) == (h, w)
            seen.update(indices_of([batch]))
    assert seen == collections.Counter(range(len(SHAPES) * 5))


def test_images_far_from_every_bucket_go_to_the_nearest_counted_in_one_warning(
        tmp_path: Path) -> None:
    path = _write(tmp_path / "ds", SHAPES * 2)
    buckets = dp.image.Buckets.of(BUCKETS.sizes, step=16, max_aspect_error=0.2)
    with pytest.warns(RuntimeWarning, match=r"4 of 14 images are further than "
                      r"max_aspect_error=0.2 .*worst 0.51"), \
            _loader(path, buckets=buckets) as loader:
        batches = list(loader)
    assert sorted(indices_of(batches)) == list(range(14))
    panorama = [b for b in batches if 3 in b["index"].tolist()]
    assert panorama[0]["image"].shape[2:] == (32, 64)  # 60 x 200: the widest bucket


def test_a_bucket_smaller_than_a_batch_is_filled_with_flagged_repeats(tmp_path: Path) -> None:
    path = _write(tmp_path / "ds", [(64, 128)] * 9 + [(128, 64)])  # one tall image
    with _loader(path, batch_size=4, seed=1) as loader:
        batches = list(loader)
    tall = [b for b in batches if b["image"].shape[2] == 64]
    assert len(tall) == 1 and tall[0]["index"].tolist() == [9] * 4
    assert tall[0]["is_padding"].tolist() == [False, True, True, True]
    assert sorted(indices_of(batches)) == list(range(10))
    with _loader(path, batch_size=4, drop_last=True) as loader:
        assert sorted(indices_of(list(loader))) != list(range(10))
        assert len(loader) == 2


def test_a_pixel_budget_sets_each_buckets_batch_size(photos: Path) -> None:
    buckets = dp.image.Buckets.of([(32, 64), (64, 32), (48, 48)], step=16,
                                  max_pixels=32 * 64 * 3, max_aspect_error=0.6)
    with _loader(photos, buckets=buckets) as loader:
        sizes = {tuple(b["image"].shape[1:]): len(b["index"]) for b in loader}
    assert sizes == {(3, 32, 64): 3, (3, 64, 32): 3, (3, 48, 48): 2}


@pytest.mark.parametrize("crop", ["random", "center"])
def test_original_size_and_crop_top_left_reproduce_the_crop_from_the_stored_image(
        tmp_path: Path, crop: str) -> None:
    """Resize the stored image to cover the bucket (PIL), cut the bucket at crop_top_left
    (after a flip, from the flipped image's left), compare: within 6 levels on average. The
    stored images are 3-6x the buckets, so the decoder takes its reduced-scale path."""
    path = _write(tmp_path / "ds", [(192, 384), (400, 190), (300, 300), (210, 330)] * 3,
                  smooth=True)
    buckets = dp.image.Buckets.of([(64, 128), (128, 64), (96, 96)], step=32, crop=crop,
                                  max_aspect_error=0.3)
    with Dataset(path) as ds:
        stored = {i: Image.open(io.BytesIO(ds[i]["image"])).convert("RGB")
                  for i in range(len(ds))}
    flip = dp.image.HorizontalFlip(0.5)
    flipped = 0
    with _loader(path, buckets=buckets, transform=flip, seed=2) as loader:
        for batch in loader:
            for image, index, (h, w), (top, left), (th, tw) in zip(
                    batch["image"], batch["index"].tolist(), batch["original_size"].tolist(),
                    batch["crop_top_left"].tolist(), batch["target_size"].tolist(),
                    strict=True):
                source = stored[index]
                assert source.size == (w, h)
                scale = max(th / h, tw / w)
                size = (max(tw, round(w * scale)), max(th, round(h * scale)))
                resized = source.resize(size, Image.Resampling.BILINEAR)
                got = image.permute(1, 2, 0).numpy().astype(np.int16)
                want = np.asarray(resized)[top:top + th, left:left + tw].astype(np.int16)
                mirrored = np.asarray(resized.transpose(Image.Transpose.FLIP_LEFT_RIGHT))[
                    top:top + th, left:left + tw].astype(np.int16)
                straight, turned = np.abs(got - want).mean(), np.abs(got - mirrored).mean()
                assert min(straight, turned) < 6, (index, straight, turned)
                flipped += turned < straight
                if crop == "center":
                    assert abs(top - (size[1] - th) / 2) <= 1.5
    assert 0 < flipped < 12  # some flipped, some not


def test_resume_at_every_step_with_buckets(photos: Path) -> None:
    check_resume_at_every_step(lambda: _loader(photos, batch_size=5, seed=3), epoch=2)


def test_resume_at_every_step_with_buckets_and_captions(tmp_path: Path) -> None:
    tokenizer = clip_style_tokenizer(tmp_path / "tok")
    write_captioned_tar(tmp_path / "src" / "a.tar",
                        [[caption(n * 2 + k, words=2 + (n + k) % 5) for k in range(2)]
                         for n in range(13)])
    convert("images", tmp_path / "src" / "a.tar", tmp_path / "out", "--short-side", 24,
            "--workers", 1, "--tokenizer", tokenizer)
    buckets = dp.image.Buckets.of([(16, 16), (16, 32), (32, 16)], step=16, max_aspect_error=0.4)
    with dp.Loader(tmp_path / "out", batch_size=3, num_workers=2, buckets=buckets) as loader:
        batches = list(loader)
    assert {tuple(b["image"].shape[2:]) for b in batches} == {(16, 16), (16, 32)}
    for batch in batches:
        assert batch["input_ids"].shape[0] == batch["image"].shape[0] == 3
        assert batch["attention_mask"].sum() > 0
    assert sorted(indices_of(batches)) == list(range(13))
    check_resume_at_every_step(lambda: dp.Loader(tmp_path / "out", batch_size=3, seed=5,
                                                 num_workers=2, buckets=buckets), epoch=1)


def test_a_resume_at_another_world_size_draws_each_image_once(photos: Path) -> None:
    make = lambda **kw: _loader(photos, seed=6, **kw)  # noqa: E731
    first, state = run_world(make, 2, None, steps=3)
    rest, _ = run_world(make, 3, state)
    drawn = collections.Counter(i for rank in first + rest for i in indices_of(rank))
    assert drawn == collections.Counter(range(len(SHAPES) * 5))
    with make() as loader:
        loader.load_state_dict(state)
        assert loader.progress()[str(photos)]["samples"] == 24  # 2 ranks x 3 steps x 4


def test_sample_steps_normalize_and_batch_steps_run_on_bucketed_batches(photos: Path) -> None:
    steps = (dp.image.HorizontalFlip() | dp.PerSample(darker)
             | dp.image.ColorJitter(brightness=0.2) | dp.image.Normalize(dtype="float32"))
    with _loader(photos, transform=steps) as loader:
        batch = next(iter(loader))
    assert batch["image"].dtype == torch.float32 and batch["image"].shape[0] == 4
    assert batch["image"].shape[2:] in {(32, 64), (64, 32), (48, 48)}


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"transform": dp.image.RandomResizedCrop(32)}, "RandomResizedCrop fixes the output size"),
    ({"transform": dp.image.CenterCrop(32)}, "CenterCrop fixes the output size"),
    ({"transform": dp.PerSample(np.flipud, shape=(8, 8))}, "sets shape=(8, 8)"),
    ({"views": (dp.image.HorizontalFlip(), dp.image.HorizontalFlip())}, "views= cannot"),
    ({"decode": "dali"}, "buckets need decode='cpu'"),
    ({"buckets": [(32, 64)]}, "buckets must be a datapipe.image.Buckets"),
])
def test_what_cannot_be_bucketed_is_refused_in_one_line(photos: Path, kwargs: dict,
                                                        named: str) -> None:
    with pytest.raises(ArgumentError) as error:
        _loader(photos, **kwargs)
    assert named in str(error.value) and "\n" not in str(error.value)
