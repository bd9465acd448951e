"""The built-in recipe steps through a real Loader with worker processes: the same seed gives
the same batches whichever process runs the steps, a resume mid-epoch gives exactly the rest,
and Mixup's soft targets reach the training loop as (N, classes) rows summing to 1."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import datapipe as dp
from tests.loader.helpers import check_resume_at_every_step
from tests.loader.test_user_steps import batches, loader_of, same_batches
from tests.loader.test_user_steps import shards as shards  # the fixture, shared

pytest.importorskip("kornia")
CROP = dp.image.RandomResizedCrop(32) | dp.image.HorizontalFlip()
RECIPES = {
    "randaugment": CROP | dp.RandAugment(2, 9) | dp.image.Normalize() | dp.RandomErasing(0.5),
    "trivialaugment": CROP | dp.TrivialAugmentWide(),
    "autoaugment": CROP | dp.AutoAugment() | dp.image.Normalize(),
    "timm": CROP | dp.RandAugment(2, 9) | dp.image.Normalize() | dp.RandomErasing(0.25)
    | dp.Mixup(0.8, 1.0, label_smoothing=0.1, num_classes=2),
}


@pytest.mark.parametrize("name", RECIPES)
def test_a_recipe_is_reproducible_in_workers_and_in_process(shards: Path, name: str) -> None:
    transform = RECIPES[name]
    first = batches(shards, transform)
    assert same_batches(first, batches(shards, transform)), "same seed, same bits"
    assert same_batches(first, batches(shards, transform, workers=0)), "any process"
    assert not same_batches(first, batches(shards, transform, epoch=1))
    plain = batches(shards, CROP)
    assert any(a["image"].shape != b["image"].shape or a["image"].dtype != b["image"].dtype
               or not torch.equal(a["image"], b["image"]) for a, b in zip(first, plain,
                                                                            strict=True))


@pytest.mark.parametrize("name", ["randaugment", "timm"])
def test_a_recipe_resumes_mid_epoch_exactly(shards: Path, name: str) -> None:
    check_resume_at_every_step(lambda: loader_of(shards, RECIPES[name]), epoch=1)


def test_mixup_targets_reach_the_loop_as_soft_rows(shards: Path) -> None:
    with loader_of(shards, RECIPES["timm"], fields=("image", "label")) as loader:
        for images, target in loader:
            assert images.dtype == torch.float32 and images.shape[1:] == (3, 32, 32)
            assert target.shape == (len(images), 2) and target.dtype == torch.float32
            torch.testing.assert_close(target.sum(1), torch.ones(len(images)))
            assert (target >= 0.05 - 1e-6).all(), "label smoothing 0.1 over 2 classes"
