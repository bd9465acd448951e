"""views=: several crops of each sample, each with its own pipeline, in one batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import datapipe as dp
from tests.conftest import convert
from tests.imagegen import make_image_folder
from tests.loader.helpers import check_resume_at_every_step
from tests.loader.test_user_steps import mix_labels, noise, shuffle_pixels

GLOBAL = dp.image.RandomResizedCrop(32, scale=(0.4, 1)) | dp.image.HorizontalFlip()
LOCAL = dp.image.RandomResizedCrop(16, scale=(0.05, 0.4)) | dp.image.HorizontalFlip()


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("views")
    src = make_image_folder(root / "src", classes=2, per_class=5, size=(64, 48))
    convert("images", src, root / "out", "--short-side", "48", "--shard-size", "9KB")
    return root / "out"


def run(shards: Path, views: tuple, workers: int = 2, **kwargs) -> list[dict]:
    with dp.Loader(shards, batch_size=4, num_workers=workers, seed=1, views=views,
                   **kwargs) as loader:
        return list(loader)


def equal(a: list[dict], b: list[dict]) -> bool:
    return all(len(x["image"]) == len(y["image"]) and
               all(torch.equal(u, v) for u, v in zip(x["image"], y["image"], strict=True))
               for x, y in zip(a, b, strict=True))


def test_dino_like_views_have_their_shapes_and_own_crops(shards: Path) -> None:
    views = (GLOBAL, GLOBAL, LOCAL, LOCAL, LOCAL)
    got = run(shards, views)
    batch = got[0]
    assert isinstance(batch["image"], tuple) and len(batch["image"]) == 5
    assert [tuple(v.shape) for v in batch["image"]] == [(4, 3, 32, 32)] * 2 + [(4, 3, 16, 16)] * 3
    assert not torch.equal(batch["image"][0], batch["image"][1]), "each view its own crop"
    assert equal(got, run(shards, views)) and equal(got, run(shards, views, workers=0))
    assert batch["label"].shape == (4,)
    with dp.Loader(shards, batch_size=4, num_workers=0, seed=1, views=views,
                   fields=("image", "label")) as loader:
        images, labels = next(iter(loader))
    assert len(images) == 5 and labels.dtype == torch.int64


def test_the_first_view_is_the_single_transform_batch(shards: Path) -> None:
    with dp.Loader(shards, batch_size=4, num_workers=0, seed=1, transform=GLOBAL) as loader:
        single = list(loader)
    viewed = run(shards, (GLOBAL, LOCAL), workers=0)
    assert all(torch.equal(s["image"], v["image"][0]) for s, v in zip(single, viewed,
                                                                      strict=True))


def test_views_resume_mid_epoch_exactly(shards: Path) -> None:
    views = (GLOBAL | dp.PerSample(noise), LOCAL | dp.PerBatch(shuffle_pixels))
    check_resume_at_every_step(lambda: dp.Loader(shards, batch_size=4, num_workers=2, seed=1,
                                                 views=views), epoch=1)


def test_each_view_runs_its_own_steps(shards: Path) -> None:
    views = (GLOBAL | dp.image.Normalize(), LOCAL | dp.PerBatch(shuffle_pixels))
    batch = run(shards, views)[0]
    assert batch["image"][0].dtype == torch.float32 and batch["image"][0].min() < 0
    assert batch["image"][1].dtype == torch.float32 and batch["image"][1].max() > 1


def test_a_view_that_changes_labels_gives_labels_per_view(shards: Path) -> None:
    batch = run(shards, (GLOBAL | dp.PerBatch(mix_labels), LOCAL))[0]
    mixed, plain = batch["label"]
    assert mixed.shape == (4, 2) and plain.dtype == torch.int64
