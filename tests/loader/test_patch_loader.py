"""PatchLoader's promises: budgets, every image once across ranks, exact and elastic resume,
the presets' settings, bad input refused in one line, and a packed batch through a real
(tiny, random) Qwen2-VL vision tower equal to its images one at a time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import datapipe as dp
from datapipe.errors import ArgumentError, DataError
from tests.conftest import convert
from tests.loader.helpers import (
    check_cuda_batches_are_the_cpu_batches,
    check_fields_view_batch_buffers,
    check_resume_at_every_step,
    indices_of,
    run_world,
)
from tests.loader.patch_data import make_patch_dataset, make_photos

COUNT = 40


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 photos from 20 to 400 px a side, every aspect in between (a few hundred patches)."""
    rng = np.random.default_rng(7)
    sizes = [(int(w), int(h)) for w, h in rng.integers(20, 400, size=(COUNT, 2))]
    return make_patch_dataset(tmp_path_factory.mktemp("patch_loader"), sizes)


def qwen(photos: Path, **kwargs: object) -> dp.PatchLoader:
    return dp.PatchLoader(photos, "qwen2_vl", **{"max_patches": 1024, **kwargs})


def siglip(photos: Path, **kwargs: object) -> dp.PatchLoader:
    return dp.PatchLoader(photos, "siglip2", **{"batch_size": 6, "max_num_patches": 64,
                                                 **kwargs})


@pytest.mark.parametrize("workers", [0, 2])
def test_packed_budget_never_exceeded_and_every_image_once(photos: Path, workers: int) -> None:
    with qwen(photos, num_workers=workers) as loader:
        batches = list(loader)
        assert len(loader) == len(batches)
    for batch in batches:
        cu = batch["cu_seqlens"]
        grids = batch["image_grid_thw"]
        assert cu[-1] == batch["pixel_values"].shape[0] == batch["num_patches"] <= 1024
        assert torch.equal(torch.diff(cu), (grids[:, 1] * grids[:, 2]).int())
        assert batch["max_seqlen"] == int(torch.diff(cu).max())
        assert batch["efficiency"] == batch["num_patches"] / 1024
        rows, cols = batch["patch_positions"].unbind(1)
        assert int(rows.max()) < int(grids[:, 1].max()) and int(cols.max()) < int(
            grids[:, 2].max())
    assert sorted(indices_of(batches)) == list(range(COUNT))
    # Best-fit-decreasing over the window: every batch but one (the window's remainder,
    # shuffled among the others) nearly full.
    assert sorted(b["efficiency"] for b in batches)[1] >= 0.97


def test_padded_budget_rows_and_masks(photos: Path) -> None:
    with siglip(photos) as loader:
        batches = list(loader)
    for batch in batches:
        assert batch["pixel_values"].shape[0] <= 6
        assert batch["pixel_values"].shape[1:] == (64, 768)
        mask = batch["pixel_attention_mask"]
        shapes = batch["spatial_shapes"]
        assert torch.equal(mask.sum(1), shapes[:, 0] * shapes[:, 1])
        assert (shapes[:, 0] * shapes[:, 1] <= 64).all()
    assert sorted(indices_of(batches)) == list(range(COUNT))


def test_a_new_shuffle_each_epoch_and_the_same_for_the_same_seed(photos: Path) -> None:
    def epochs(seed: int) -> list[list[int]]:
        with qwen(photos, seed=seed) as loader:
            out = []
            for epoch in range(2):
                loader.set_epoch(epoch)
                out.append(indices_of(list(loader)))
            return out

    first = epochs(0)
    assert first[0] != first[1] and sorted(first[1]) == list(range(COUNT))
    assert epochs(0) == first and epochs(1) != first


@pytest.mark.parametrize("world", [2, 3])
def test_every_image_exactly_once_across_ranks_with_equal_steps(photos: Path,
                                                               world: int) -> None:
    ranks, _ = run_world(lambda **kw: qwen(photos, **kw), world, None)
    assert len({len(batches) for batches in ranks}) == 1
    seen = [i for batches in ranks for i in indices_of(batches)]
    assert sorted(seen) == list(range(COUNT))


@pytest.mark.parametrize("make", [qwen, siglip], ids=["packed", "padded"])
def test_resume_mid_epoch_at_every_step_is_exact(photos: Path, make: object) -> None:
    check_resume_at_every_step(lambda: make(photos, num_workers=0, flip=True), epoch=1)


def test_resume_with_workers_is_exact(photos: Path) -> None:
    check_resume_at_every_step(lambda: qwen(photos, num_workers=2, max_patches=2048))


def test_elastic_resume_at_another_world_size_sees_the_rest_once(photos: Path) -> None:
    before, state = run_world(lambda **kw: qwen(photos, **kw), 2, None, steps=2)
    after, _ = run_world(lambda **kw: qwen(photos, **kw), 3, state)
    seen = [i for batches in before + after for i in indices_of(batches)]
    assert sorted(seen) == list(range(COUNT))


def test_batch_fields_view_the_shared_buffers_so_a_gpu_copy_reads_them_in_place(
        photos: Path) -> None:
    with qwen(photos, num_workers=2) as loader:
        check_fields_view_batch_buffers(loader, ("pixel_values", "patch_positions"))
    with siglip(photos, num_workers=2) as loader:
        check_fields_view_batch_buffers(loader, ("pixel_values", "pixel_attention_mask",
                                                 "patch_positions"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.cuda
@pytest.mark.parametrize("make", [qwen, siglip])
def test_on_cuda_patch_batches_are_the_cpu_batches(photos: Path, make: object) -> None:
    check_cuda_batches_are_the_cpu_batches(
        lambda **device: make(photos, num_workers=2, seed=3, **device))


def test_flip_mirrors_some_images_the_same_way_every_time(photos: Path) -> None:
    def pixels(flip: bool) -> dict[int, torch.Tensor]:
        with siglip(photos, flip=flip, shuffle=False) as loader:
            return {i: batch["pixel_values"][j].clone() for batch in loader
                    for j, i in enumerate(batch["index"].tolist())}

    plain, flipped = pixels(False), pixels(True)
    differ = {i for i in plain if not torch.equal(plain[i], flipped[i])}
    assert 0 < len(differ) < COUNT
    again = pixels(True)
    assert all(torch.equal(again[i], flipped[i]) for i in again)


def test_state_and_progress_count_images(photos: Path) -> None:
    with qwen(photos) as loader:
        it = iter(loader)
        first = next(it)
        state = loader.state_dict()
    progress = next(iter(state["progress"].values()))
    assert progress["images"] == len(first["index"])
    assert progress["patches_this_epoch"] == first["num_patches"]


def test_preset_contradicted_by_an_argument_is_refused_naming_both(photos: Path) -> None:
    with pytest.raises(ArgumentError, match=r"^patch_size=16 contradicts preset='qwen2_vl', "
                                            r"which has patch_size=14$"):
        qwen(photos, patch_size=16)
    with pytest.raises(ArgumentError, match=r"layout='packed' contradicts preset='siglip2'"):
        siglip(photos, layout="packed")
    with pytest.raises(ArgumentError, match=r"max_num_patches=64 does not apply to "
                                            r"preset='qwen2_vl'"):
        qwen(photos, max_num_patches=64)
    with pytest.raises(ArgumentError, match=r"preset must be one of"):
        dp.PatchLoader(photos, "clip", max_patches=1024)
    qwen(photos, patch_size=14, merge_size=2).close()  # agreeing with the preset is fine


def test_a_budget_below_one_images_patches_is_refused_or_downscaled(photos: Path) -> None:
    with pytest.raises(ArgumentError, match=r"image \d+ has \d+ patches, more than "
                                            r"max_patches=100; .*oversize='downscale'"):
        qwen(photos, max_patches=100)
    with qwen(photos, max_patches=100, oversize="downscale") as loader:
        batches = list(loader)
    assert max(b["num_patches"] for b in batches) <= 100
    assert sorted(indices_of(batches)) == list(range(COUNT))


@pytest.mark.parametrize(("arguments", "message"), [
    ({"max_patches": None}, "give max_patches"),
    ({"max_patches": 0}, "max_patches"),
    ({"batch_size": 4}, "batch_size does not apply"),
    ({"oversize": "shrink"}, "oversize must be one of"),
    ({"min_pixels": 10 ** 6, "max_pixels": 10 ** 5}, "min_pixels=1000000 is more than"),
])
def test_bad_arguments_fail_at_construction(photos: Path, arguments: dict,
                                            message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        qwen(photos, **arguments)


def test_padded_budget_must_hold_an_image(photos: Path) -> None:
    with pytest.raises(ArgumentError, match=r"max_patches=32 holds no image of 64 patches"):
        dp.PatchLoader(photos, "siglip2", max_patches=32, max_num_patches=64)


def test_a_text_dataset_is_refused(tmp_path: Path) -> None:
    from tests.conftest import convert

    (tmp_path / "a.txt").write_text("some text\n")
    convert("text", tmp_path / "a.txt", tmp_path / "text", "--tokenizer", "bytes")
    with pytest.raises(DataError, match="PatchLoader reads images"):
        dp.PatchLoader(tmp_path / "text", "navit", max_patches=1024)


def test_extreme_aspect_ratios_are_placed_within_the_limits(tmp_path: Path) -> None:
    """Qwen2-VL's processor raises beyond 200:1; the loader never does mid-epoch."""
    data = make_patch_dataset(tmp_path, [(4000, 8), (6, 3000), (3, 2)])
    with dp.PatchLoader(data, "qwen2_vl", max_patches=4096, max_pixels=200_000) as loader:
        batches = list(loader)
    grids = torch.cat([b["image_grid_thw"] for b in batches])
    assert (grids[:, 1:] >= 2).all() and (grids[:, 1:] % 2 == 0).all()
    assert (grids[:, 1] * grids[:, 2] * 14 * 14 <= 200_000).all()


def test_navit_patches_row_by_row_with_their_positions(photos: Path) -> None:
    with dp.PatchLoader(photos, "navit", max_patches=2048, patch_size=8,
                        shuffle=False) as loader:
        batch = next(iter(loader))
    assert batch["pixel_values"].shape[1] == 3 * 8 * 8
    rows, cols = batch["spatial_shapes"][0].tolist()
    first = batch["patch_positions"][: rows * cols]
    assert first[:, 0].tolist() == [r for r in range(rows) for _ in range(cols)]
    assert first[:, 1].tolist() == list(range(cols)) * rows


def test_packed_batch_through_a_qwen2_vl_vision_tower_equals_one_image_at_a_time(
        photos: Path) -> None:
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import (
        Qwen2VisionTransformerPretrainedModel,
    )

    torch.manual_seed(0)
    # Eager attention: the reference math, each image's block of the packed sequence on its own.
    config = Qwen2VLVisionConfig(depth=2, embed_dim=32, hidden_size=48, num_heads=2,
                                 mlp_ratio=2, attn_implementation="eager")
    tower = Qwen2VisionTransformerPretrainedModel(config).double().eval()
    with qwen(photos, max_patches=4096) as loader:
        batch = next(iter(loader))
    assert len(batch["index"]) > 3
    grids, cu = batch["image_grid_thw"], batch["cu_seqlens"].tolist()
    with torch.no_grad():
        packed = tower(batch["pixel_values"].double(), grid_thw=grids).pooler_output
        alone = torch.cat([tower(batch["pixel_values"][cu[j]:cu[j + 1]].double(),
                                 grid_thw=grids[j:j + 1]).pooler_output
                           for j in range(len(grids))])
    assert packed.shape == (cu[-1] // 4, 48)
    torch.testing.assert_close(packed, alone, rtol=1e-10, atol=1e-10)


def test_a_corrupt_image_names_its_shard_and_row_or_is_skipped(tmp_path: Path) -> None:
    src = tmp_path / "src" / "class_0"

    make_photos(src, [(64, 48), (80, 40), (50, 70), (90, 90)])
    out = tmp_path / "out"
    convert("images", tmp_path / "src", out, "--short-side", "0", "--format", "msgpack")
    shard = next(out.glob("shard-*"))
    data = bytearray(shard.read_bytes())
    start = data.find(b"\xff\xd8\xff")  # the first JPEG in the shard: break its header
    data[start:start + 40] = b"\x00" * 40
    shard.write_bytes(bytes(data))
    for workers in (0, 2):
        with dp.PatchLoader(out, "navit", max_patches=1024, num_workers=workers,
                            shuffle=False) as loader, pytest.raises(DataError) as err:
            list(loader)
        assert shard.name in str(err.value) and "sample 0" in str(err.value)
    with dp.PatchLoader(out, "navit", max_patches=1024, shuffle=False,
                        on_error="skip") as loader, pytest.warns(UserWarning, match="skipped 1"):
        batches = list(loader)
    assert indices_of(batches) == [1, 2, 3] and loader.skipped[0][0] == 0
    assert sum(b["num_patches"] for b in batches) == sum(
        int(torch.diff(b["cu_seqlens"]).sum()) for b in batches)
