"""Aspect-ratio buckets over a mixture of datasets, from real shards in real worker processes:
every image of each source in its own bucket (by its stored size) and once per epoch over 1 and
2 ranks, every batch one bucket's, each source's share of an epoch its weight's, phases,
progress per source, exact resume at every step (with captions too) and at another world size,
and what cannot be mixed with buckets refused in one line."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import datapipe as dp
from datapipe.errors import ArgumentError
from datapipe.format import Dataset
from datapipe.sampling.mixture_weights import MixtureWeights, apportion
from tests.captions_data import caption, clip_style_tokenizer, write_captioned_tar
from tests.conftest import convert
from tests.imagegen import jpeg_bytes, noise_image
from tests.loader.helpers import check_resume_at_every_step, run_world

BUCKETS = dp.image.Buckets.of([(32, 64), (64, 32), (48, 48)], step=16, max_aspect_error=0.6)
# Mostly wide photos, and mostly tall ones: each source fills the buckets its own way.
SHAPES = {"wide": [(64, 128), (60, 130), (96, 96), (70, 120), (80, 120)] * 4,
          "tall": [(128, 64), (130, 70), (100, 98), (120, 60)] * 3}


def _write(path: Path, shapes: list[tuple[int, int]], seed: int) -> Path:
    with dp.DatasetWriter(path, {"image": "jpeg", "label": "int64"}) as writer:
        for i, (h, w) in enumerate(shapes):
            writer.write({"image": jpeg_bytes(noise_image(w, h, seed + i), quality=90),
                          "label": i % 2})
    return path


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bucket-mix")
    return {name: _write(root / name, shapes, 100 * s)
            for s, (name, shapes) in enumerate(SHAPES.items())}


def _loader(sources: dict[str, Path], **kwargs: Any) -> dp.Loader:
    return dp.Loader(sources, **{"batch_size": 4, "num_workers": 2, "buckets": BUCKETS,
                                 **kwargs})


def _stored_sizes(sources: dict[str, Path]) -> list[np.ndarray]:
    """Each source's (height, width) per sample, as its dataset stores them."""
    out = []
    for path in sources.values():
        with Dataset(path) as ds:
            out.append(np.stack([ds.scalar("height"), ds.scalar("width")], axis=1))
    return out


def _drawn(batches: list[dict[str, Any]]) -> collections.Counter:
    return collections.Counter(
        (int(s), int(i)) for b in batches for s, i in
        zip(b["source"][~b["is_padding"]], b["index"][~b["is_padding"]], strict=True))


@pytest.mark.parametrize("world", [1, 2])
def test_every_image_of_each_source_once_per_epoch_in_its_own_bucket(
        sources: dict[str, Path], world: int) -> None:
    sizes = _stored_sizes(sources)
    ranks, _ = run_world(lambda **kw: _loader(sources, seed=3, **kw), world, None, epoch=1)
    for batches in ranks:
        for batch in batches:
            n, _, h, w = batch["image"].shape
            assert n == 4 and batch["target_size"].tolist() == [[h, w]] * 4
            for s, i, original in zip(batch["source"].tolist(), batch["index"].tolist(),
                                      batch["original_size"].tolist(), strict=True):
                assert original == sizes[s][i].tolist()
                k, _ = BUCKETS.assign(sizes[s][i:i + 1, 0], sizes[s][i:i + 1, 1])
                assert BUCKETS.sizes[int(k[0])] == (h, w)
    drawn = _drawn([b for batches in ranks for b in batches])
    assert drawn == collections.Counter((s, i) for s, shapes in enumerate(SHAPES.values())
                                        for i in range(len(shapes)))


def test_each_sources_share_of_an_epoch_is_its_weights_and_progress_counts_it(
        sources: dict[str, Path]) -> None:
    """Weights 1:3 over epochs of 40 samples: the wide source (20 images) down-sampled to 10,
    the tall one (12) up-sampled to 30, exactly, however the buckets split them."""
    quota = apportion(40, MixtureWeights((1, 3)).shares)
    with _loader(sources, weights={"wide": 1, "tall": 3}, epoch_size=40) as loader:
        for epoch in range(2):
            loader.set_epoch(epoch)
            batches = list(loader)
            per_source = collections.Counter(s for s, _ in _drawn(batches).elements())
            assert [per_source[0], per_source[1]] == quota == [10, 30]
            assert len({tuple(b["image"].shape[2:]) for b in batches}) == 3
        assert loader.progress() == {"wide": {"samples": 20}, "tall": {"samples": 60}}
    with _loader(sources, weights={"wide": 1, "tall": 3}, epoch_size=40) as loader:
        seen = _drawn(list(loader)) + _drawn(list(loader))
    assert {i for s, i in seen if s == 0} == set(range(20))  # two epochs: all of it, once


def test_a_phase_switches_the_sources_of_bucketed_batches(sources: dict[str, Path]) -> None:
    weights = [(0, {"wide": 1, "tall": 0}), (3, {"wide": 0, "tall": 1})]
    with _loader(sources, weights=weights, epoch_size=32, num_workers=1) as loader:
        batches = list(loader)
    kinds = [set(b["source"][~b["is_padding"]].tolist()) for b in batches]
    switch = kinds.index({1})
    assert kinds[:switch] == [{0}] * switch and kinds[switch:] == [{1}] * (len(kinds) - switch)
    assert sum(int((~b["is_padding"]).sum()) for b in batches[:switch]) == 12  # 3 steps of 4


def test_resume_at_every_step_in_a_bucketed_mixture(sources: dict[str, Path]) -> None:
    check_resume_at_every_step(lambda: _loader(sources, batch_size=5, seed=4,
                                               weights={"wide": 2, "tall": 1}, epoch_size=30),
                               epoch=2)


def test_resume_at_every_step_in_a_bucketed_mixture_with_captions(tmp_path: Path) -> None:
    tokenizer = clip_style_tokenizer(tmp_path / "tok")
    paths = {}
    for name, first, count in (("a", 0, 9), ("b", 100, 7)):
        write_captioned_tar(tmp_path / name / "src.tar",
                            [[caption(n * 2 + k, words=2 + (n + k) % 5) for k in range(2)]
                             for n in range(first, first + count)], first)
        convert("images", tmp_path / name / "src.tar", tmp_path / name / "out",
                "--short-side", 24, "--workers", 1, "--tokenizer", tokenizer)
        paths[name] = tmp_path / name / "out"
    buckets = dp.image.Buckets.of([(16, 16), (16, 32), (32, 16)], step=16, max_aspect_error=0.4)

    def make() -> dp.Loader:
        return dp.Loader(paths, batch_size=3, num_workers=2, seed=5, buckets=buckets,
                         weights={"a": 1, "b": 1}, epoch_size=14)

    with make() as loader:
        batches = list(loader)
    for batch in batches:
        assert batch["input_ids"].shape[0] == batch["image"].shape[0] == 3
        assert batch["attention_mask"].sum() > 0
    per_source = collections.Counter(s for s, _ in _drawn(batches).elements())
    assert [per_source[0], per_source[1]] == [7, 7]
    check_resume_at_every_step(make, epoch=1)


def test_a_resume_at_another_world_size_draws_each_image_once(sources: dict[str, Path]) -> None:
    make = lambda **kw: _loader(sources, seed=6, **kw)  # noqa: E731
    first, state = run_world(make, 2, None, steps=2)
    rest, _ = run_world(make, 3, state)
    drawn = _drawn([b for rank in first + rest for b in rank])
    assert drawn == collections.Counter((s, i) for s, shapes in enumerate(SHAPES.values())
                                        for i in range(len(shapes)))
    head = _drawn([b for rank in first for b in rank])
    with make(rank=0, world_size=3) as loader:
        loader.load_state_dict(state)
        assert loader.progress() == {
            name: {"samples": sum(1 for s, _ in head if s == k)}
            for k, name in enumerate(SHAPES)}


def test_a_source_with_no_image_near_any_bucket_is_refused_in_one_line(
        sources: dict[str, Path], tmp_path: Path) -> None:
    panoramas = _write(tmp_path / "pano", [(40, 200), (30, 180)], 7)
    with pytest.raises(ArgumentError) as error:
        _loader({**sources, "pano": panoramas})
    assert "path['pano']" in str(error.value) and "none of its 2 images" in str(error.value)
    assert "\n" not in str(error.value)


def test_phases_with_a_pixel_budget_per_batch_are_refused_in_one_line(
        sources: dict[str, Path]) -> None:
    budget = dp.image.Buckets.of(BUCKETS.sizes, step=16, max_pixels=32 * 64 * 3,
                                 max_aspect_error=0.6)
    with pytest.raises(ArgumentError, match=r"^weights: a mixture's phases begin at a step"):
        _loader(sources, buckets=budget, weights=[(0, [1, 1]), (5, [1, 2])])
    with pytest.raises(ArgumentError, match=r"^reweight=True: "):
        _loader(sources, buckets=budget, reweight=True)
    with _loader(sources, buckets=budget, weights=[1, 1], num_workers=0) as loader:
        sizes = {tuple(b["image"].shape[2:]): len(b["index"]) for b in loader}
    assert sizes == {(32, 64): 3, (64, 32): 3, (48, 48): 2}
