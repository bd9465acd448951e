"""The buckets group: a real smoke run of the torch DataLoader with a bucketed batch sampler and
datapipe's bucketed and fixed-size runs through the suite, and the peer's batches checked
against the Buckets they were made with."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from datapipe.suite import Options, run
from datapipe.suite.groups import images, pairs, recipe
from datapipe.suite.groups.buckets_peers import (
    BucketBatchSampler,
    BucketedFolder,
    checked,
    cover_crop_flip,
    kohya_buckets,
)
from datapipe.suite.groups.image_peers import Job
from datapipe.suite.isolated import clock
from tests.suite.outputs import check_outputs

OTHERS = frozenset(f"{group.name}:{p.name}" for group in (images.GROUP, recipe.GROUP, pairs.GROUP)
                   for p in group.peers)


def test_buckets_group_measures_datapipe_against_a_bucketed_dataloader(tmp_path: Path) -> None:
    opts = replace(Options.smoke_test(("images",), tmp_path / "out", data=tmp_path / "data"),
                   skip=OTHERS)
    assert run(opts) == 0
    data = check_outputs(tmp_path / "out", ["buckets"])
    panel = next(p for p in data["suites"]["images"] if p["key"] == "buckets")
    entries = {e["name"]: e for e in panel["entries"]}
    for name in ("torch-buckets", "datapipe-buckets", "datapipe-fixed"):
        assert entries[name]["status"] == "ok" and entries[name]["median"] > 0, entries[name]
    details = (tmp_path / "out" / "buckets.md").read_text()
    assert "By pixels/s: datapipe-buckets " in details
    assert "× the torch DataLoader (goal ≥ 3×:" in details
    assert "By pixels per CPU-second: datapipe-buckets " in details
    assert "of the fixed-size job's rate on the same shards" in details
    result = json.loads((tmp_path / "out" / "buckets.json").read_text())
    assert set(result["meta"]["forms"]) == {"aspect-jpegs", "aspect-datapipe"}
    for name in ("torch-buckets", "datapipe-buckets"):  # bucket sizes: about 1024² each
        run_ = result["outcomes"][name]["runs"][0]
        assert 0.75 * 1024 ** 2 < run_["pixels"] / run_["images"] <= 1024 ** 2
    fixed = result["outcomes"]["datapipe-fixed"]["runs"][0]
    assert fixed["pixels"] == fixed["images"] * 1024 ** 2


def _photos(root: Path, sizes: list[tuple[int, int]]) -> Path:
    folder = root / "class_00"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for n, (h, w) in enumerate(sizes):
        pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"photo_{n:03d}.jpg")
    return root


def test_the_bucketed_sampler_gives_each_image_once_in_its_buckets_batches(
        tmp_path: Path) -> None:
    sizes = [(300, 600), (600, 300), (400, 400), (410, 400), (320, 480), (500, 500), (400, 410)]
    dataset = BucketedFolder(str(_photos(tmp_path, sizes)), kohya_buckets())
    sampler = BucketBatchSampler(dataset.bucket, 2, seed=0)
    for _ in range(2):  # two epochs, each a fresh order
        batches = list(sampler)
        assert len(batches) == len(sampler)
        seen = [i for b in batches for i in b]
        assert set(seen) == set(range(len(sizes)))
        assert len(seen) - len(sizes) == sum(len(m) % 2 for m in sampler.members)  # fill
        for b in batches:
            assert len(b) == 2 and len({int(dataset.bucket[i]) for i in b}) == 1
    square = kohya_buckets().sizes.index((1024, 1024))
    assert [int(dataset.bucket[i]) == square for i in range(len(sizes))] == \
        [False, False, True, True, False, True, True]


def test_the_peers_crop_is_the_cover_resized_image_cut_at_sdxl_s_corner() -> None:
    """The crop reproduced from the stored image as SDXL's fields describe it: resized to cover
    (768 x 512 for 300 x 200 into 640 x 512), flipped or not, cut at (top, left)."""
    ramp = np.add.outer(np.arange(200), 2 * np.arange(300)) % 256  # a smooth, asymmetric image
    image = Image.fromarray(np.repeat(ramp[:, :, None], 3, axis=2).astype(np.uint8))
    full = image.resize((768, 512), Image.Resampling.BILINEAR)
    mirrored = full.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    lefts, flips = set(), 0
    for _ in range(40):
        pixels, top, left = cover_crop_flip(image, (512, 640))
        assert pixels.shape == (3, 512, 640) and pixels.dtype == torch.uint8
        assert top == 0 and 0 <= left <= 768 - 640
        got = pixels.permute(1, 2, 0).numpy().astype(int)
        errors = [np.abs(got - np.asarray(source.crop((left, 0, left + 640, 512)), int)).mean()
                  for source in (full, mirrored)]
        assert min(errors) < 2, errors
        flips += errors[1] < errors[0]
        lefts.add(left)
    assert 0 < flips < 40 and len(lefts) > 5  # random flips and corners


def test_a_batch_without_the_size_fields_fails_its_run() -> None:
    sizes = kohya_buckets().sizes
    batch = {"image": torch.zeros(2, 3, 1024, 1024, dtype=torch.uint8),
             "original_size": torch.zeros(2, 2, dtype=torch.int64),
             "crop_top_left": torch.zeros(2, 2, dtype=torch.int64),
             "target_size": torch.tensor([[1024, 1024]] * 2)}
    assert checked(batch, sizes) is batch["image"]
    with np.testing.assert_raises_regex(RuntimeError, "no bucket's size"):
        checked({**batch, "image": torch.zeros(2, 3, 1000, 1024, dtype=torch.uint8)}, sizes)
    with np.testing.assert_raises_regex(RuntimeError, r"crop_top_left is \(2,\)"):
        checked({**batch, "crop_top_left": torch.zeros(2, dtype=torch.int64)}, sizes)


def test_the_clock_counts_the_pixels_of_batches_of_many_sizes() -> None:
    sizes = [(1024, 1024), (832, 1216), (1216, 832), (1024, 1024)]
    batches = iter([(epoch, torch.zeros(8, 3, h, w, dtype=torch.uint8))
                    for epoch in (0, 1) for h, w in sizes])
    result = clock.measure(batches, Job("x", 2, epochs=1, warmup=1, batch=8), None)
    assert result["images"] == 32
    assert result["pixels"] == 8 * sum(h * w for h, w in sizes)
    assert result["pixel_rate"] == pytest.approx(result["pixels"] / result["seconds"])
    assert result["pixel_rate"] / result["rate"] == pytest.approx(result["pixels"] / 32)
    with pytest.raises(RuntimeError, match=r"first batch is \(7, 3, 64, 64\)"):
        clock.measure(iter([(0, torch.zeros(7, 3, 64, 64, dtype=torch.uint8))]),
                      Job("x", 2, epochs=1, warmup=0, batch=8), None)
