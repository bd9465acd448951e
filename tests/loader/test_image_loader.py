from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

import datapipe as dp
from datapipe.errors import ArgumentError, DataError
from datapipe.format import Dataset
from tests.conftest import convert
from tests.imagegen import make_image_folder
from tests.loader.helpers import check_resume_at_every_step, indices_of, same_batch

CROP = dp.image.RandomResizedCrop(32) | dp.image.HorizontalFlip()


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """23 samples over uneven shards (a small shard size splits them unevenly)."""
    root = tmp_path_factory.mktemp("loader")
    src = make_image_folder(root / "src", classes=3, per_class=8, size=(72, 48))
    (src / "class_2" / "img_007.jpg").unlink()
    out = root / "out"
    convert("images", src, out, "--short-side", "48", "--shard-size", "9KB")
    return out


def test_batches_have_the_documented_shape(shards: Path) -> None:
    with dp.Loader(shards, batch_size=5, num_workers=0, transform=CROP) as loader:
        batch = next(iter(loader))
        assert len(loader) == 5
    assert batch["image"].shape == (5, 3, 32, 32) and batch["image"].dtype == torch.uint8
    assert batch["image"].is_contiguous(memory_format=torch.channels_last)
    assert batch["label"].dtype == torch.int64 and batch["index"].dtype == torch.int64
    with Dataset(shards) as ds:
        labels = ds.scalar("label")
    assert batch["label"].tolist() == labels[batch["index"].numpy()].tolist()


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_every_sample_once_per_epoch_and_deterministic(shards: Path, workers: int) -> None:
    def run(seed: int) -> list[list[int]]:
        with dp.Loader(shards, batch_size=4, num_workers=workers, seed=seed,
                       transform=CROP) as loader:
            epochs = []
            for epoch in range(2):
                loader.set_epoch(epoch)
                epochs.append(indices_of(list(loader)))
            return epochs

    first = run(seed=0)
    for epoch in first:
        assert sorted(epoch) == list(range(23))
    assert first[0] != first[1], "a new shuffle each epoch"
    assert run(seed=0) == first and run(seed=1) != first


@pytest.mark.parametrize("world", [1, 2, 3])
def test_exactly_once_across_ranks_with_equal_steps(shards: Path, world: int) -> None:
    seen, steps = [], set()
    for rank in range(world):
        with dp.Loader(shards, batch_size=3, num_workers=1, rank=rank, world_size=world,
                       transform=CROP) as loader:
            batches = list(loader)
            steps.add(len(batches))
            seen.extend(indices_of(batches))
    assert len(steps) == 1, "every rank runs the same number of steps (no DDP hang)"
    assert sorted(seen) == list(range(23))


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_resume_mid_epoch_at_every_step_is_exact(shards: Path, workers: int) -> None:
    check_resume_at_every_step(lambda: dp.Loader(shards, batch_size=6, num_workers=workers,
                                                 seed=3, transform=CROP), epoch=1)


def test_repeated_save_restore_cycles_still_see_the_dataset_once(shards: Path) -> None:
    seen: list[int] = []
    state = None
    while True:
        with dp.Loader(shards, batch_size=4, num_workers=2, transform=CROP) as loader:
            if state:
                loader.load_state_dict(state)
            loader.set_epoch(0)
            it = iter(loader)
            batch = next(it, None)
            if batch is None:
                break
            seen.extend(indices_of([batch]))
            state = json.loads(json.dumps(loader.state_dict()))  # states are plain JSON
    assert sorted(seen) == list(range(23))


def test_finished_epoch_moves_on_by_itself_and_restores_at_the_boundary(shards: Path) -> None:
    with dp.Loader(shards, batch_size=8, num_workers=0, transform=CROP) as loader:
        list(loader)
        state = loader.state_dict()
        second = indices_of(list(loader))
    assert loader.epoch == 1
    with dp.Loader(shards, batch_size=8, num_workers=0, transform=CROP) as restored:
        restored.load_state_dict(state)
        assert indices_of(list(restored)) == second, "a restore at the boundary starts epoch 1"


def test_state_from_other_settings_is_refused(shards: Path) -> None:
    with dp.Loader(shards, batch_size=4, num_workers=0, transform=CROP) as loader:
        state = loader.state_dict()
    with dp.Loader(shards, batch_size=5, num_workers=0, transform=CROP) as other, \
            pytest.raises(ArgumentError, match="batch_size"):
        other.load_state_dict(state)


@pytest.mark.parametrize(("arguments", "message"), [
    ({"device": "tpu"}, "device 'tpu' is not a torch device"),
    ({"device": "mps"}, "delivers to 'cpu' or 'cuda'"),
    ({"seed": -1}, "seed must be a non-negative integer"),
    ({"seed": "7"}, "seed must be a non-negative integer"),
    ({"seed": 1.5}, "seed must be a non-negative integer"),
])
def test_bad_arguments_fail_at_construction(shards: Path, arguments: dict, message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        dp.Loader(shards, num_workers=0, transform=CROP, **arguments)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
def test_cuda_without_a_device_fails_at_construction(shards: Path) -> None:
    with pytest.raises(ArgumentError, match="sees no CUDA device"):
        dp.Loader(shards, num_workers=0, transform=CROP, device="cuda")


@pytest.mark.parametrize("epoch", [-1, "1", 0.5])
def test_bad_epoch_is_refused(shards: Path, epoch: object) -> None:
    with dp.Loader(shards, num_workers=0, transform=CROP) as loader, \
            pytest.raises(ArgumentError, match="epoch must be a non-negative integer"):
        loader.set_epoch(epoch)


def test_numpy_integers_are_accepted_as_seed_and_epoch(shards: Path) -> None:
    with dp.Loader(shards, batch_size=4, num_workers=0, transform=CROP, seed=np.int64(3)) as a, \
            dp.Loader(shards, batch_size=4, num_workers=0, transform=CROP, seed=3) as b:
        a.set_epoch(np.int64(2))
        b.set_epoch(2)
        assert all(same_batch(x, y) for x, y in zip(a, b, strict=True))


def test_center_crop_and_normalize(shards: Path) -> None:
    transform = dp.image.CenterCrop(24) | dp.image.Normalize(dtype="bfloat16")
    with dp.Loader(shards, batch_size=4, num_workers=0, shuffle=False,
                   transform=transform) as loader:
        batch = next(iter(loader))
    image = batch["image"]
    assert image.shape == (4, 3, 24, 24) and image.dtype == torch.bfloat16
    assert float(image.float().min()) > -2.5 and float(image.float().max()) < 2.7


def _batches(shards: Path, transform: dp.image.Transform, workers: int) -> list[dict]:
    with dp.Loader(shards, batch_size=5, num_workers=workers, seed=2,
                   transform=transform) as loader:
        return list(loader)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_cpu_normalize_is_done_by_the_workers(shards: Path, monkeypatch: pytest.MonkeyPatch,
                                              dtype: str, workers: int) -> None:
    """Identical to the batch op on the same uint8 batch, and the training thread never runs
    it: the workers write normalised values while they decode."""
    from datapipe.image.batch_ops import BatchTransforms

    norm = dp.image.Normalize(dtype=dtype)
    reference = BatchTransforms((norm,), seed=2)
    expected = [reference(b["image"], 0, i) for i, b in enumerate(_batches(shards, CROP, workers))]

    def not_here(*args: object) -> None:
        raise AssertionError("normalised in the process that iterates the loader")

    monkeypatch.setattr(BatchTransforms, "__call__", not_here)
    got = [b["image"] for b in _batches(shards, CROP | norm, workers)]
    for image, want in zip(got, expected, strict=True):
        assert image.dtype == want.dtype and image.stride() == want.stride()
        assert torch.equal(image, want)


def test_a_jitter_after_normalize_gets_the_workers_floats(shards: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("kornia")
    from datapipe.image.batch_ops import BatchTransforms

    norm, jitter = dp.image.Normalize(), dp.image.ColorJitter(0.4, 0.4, 0.4, 0.1)
    reference = BatchTransforms((norm, jitter), seed=2)
    expected = [reference(b["image"], 0, i) for i, b in enumerate(_batches(shards, CROP, 2))]
    seen: list[torch.dtype] = []
    call = BatchTransforms.__call__

    def recording(self: BatchTransforms, images: torch.Tensor, *args: int) -> torch.Tensor:
        seen.append(images.dtype)
        return call(self, images, *args)

    monkeypatch.setattr(BatchTransforms, "__call__", recording)
    got = [b["image"] for b in _batches(shards, CROP | norm | jitter, 2)]
    assert set(seen) == {torch.float32}, "the batch op starts from the workers' floats"
    assert all(torch.equal(g, e) for g, e in zip(got, expected, strict=True))


def test_color_jitter_runs_through_kornia(shards: Path) -> None:
    pytest.importorskip("kornia")
    transform = CROP | dp.image.ColorJitter(0.4, 0.4, 0.4, 0.1)
    runs = []
    for _ in range(2):
        with dp.Loader(shards, batch_size=4, num_workers=0, transform=transform) as loader:
            runs.append(next(iter(loader))["image"])
    assert runs[0].dtype == torch.float32 and torch.equal(runs[0], runs[1])


def test_raw_pixel_shards_skip_decoding(tmp_path: Path) -> None:
    src = make_image_folder(tmp_path / "src", classes=1, per_class=3, size=(40, 40))
    convert("images", src, tmp_path / "raw", "--short-side", "32", "--encoding", "raw")
    convert("images", src, tmp_path / "jpg", "--short-side", "32", "--quality", "100")
    images = {}
    for name in ("raw", "jpg"):
        with dp.Loader(tmp_path / name, batch_size=3, num_workers=0, shuffle=False,
                       transform=dp.image.CenterCrop(32, fraction=1.0)) as loader:
            images[name] = next(iter(loader))["image"].float()
    assert images["raw"].shape == images["jpg"].shape == (3, 3, 32, 32)
    assert float((images["raw"] - images["jpg"]).abs().mean()) < 4


def test_varying_sizes_without_a_crop_is_a_clear_error(shards: Path) -> None:
    with pytest.raises(ArgumentError, match="differ in size"):
        dp.Loader(shards, num_workers=0)


def test_corrupt_sample_names_shard_and_sample_or_is_skipped(tmp_path: Path) -> None:
    src = make_image_folder(tmp_path / "src", classes=1, per_class=4, size=(40, 40))
    out = tmp_path / "out"
    convert("images", src, out, "--short-side", "32", "--format", "msgpack")
    shard = next(out.glob("shard-*"))
    data = bytearray(shard.read_bytes())
    start = data.find(b"\xff\xd8\xff")  # first JPEG in the shard: break its header
    data[start:start + 40] = b"\x00" * 40
    shard.write_bytes(bytes(data))
    for workers in (0, 2):
        with dp.Loader(out, batch_size=2, num_workers=workers, shuffle=False,
                       transform=CROP) as loader, pytest.raises(DataError) as err:
            list(loader)
        assert shard.name in str(err.value) and "sample 0" in str(err.value)
    with dp.Loader(out, batch_size=2, num_workers=2, shuffle=False, transform=CROP,
                   on_error="skip") as loader, pytest.warns(UserWarning, match="skipped 1"):
        seen = indices_of(list(loader))
    assert seen == [1, 2, 3] and loader.skipped[0][0] == 0


def test_worker_death_surfaces_instead_of_hanging(shards: Path) -> None:
    with dp.Loader(shards, batch_size=2, num_workers=2, transform=CROP) as loader:
        it = iter(loader)
        next(it)
        os.kill(loader._producer._pool._processes[1].pid, signal.SIGKILL)
        with pytest.raises(dp.WorkerError, match="died"):
            list(it)


def test_worker_exception_carries_its_traceback(shards: Path, monkeypatch) -> None:
    def explode(*args, **kwargs):
        raise RuntimeError("boom in crop planning")

    # A bug (not bad data) inside a worker: planted after the fork, as a real one would be.
    monkeypatch.setattr("datapipe.loader.image_batches.plan_crops", explode)
    with dp.Loader(shards, batch_size=2, num_workers=1, transform=CROP) as loader, \
            pytest.raises(dp.WorkerError) as err:
        list(loader)
    assert "boom in crop planning" in str(err.value) and "Traceback" in str(err.value)


def test_cuda_device_path(shards: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    with dp.Loader(shards, batch_size=4, num_workers=1, device="cuda",
                   transform=CROP | dp.image.Normalize(dtype="float16")) as loader:
        batch = next(iter(loader))
    assert batch["image"].is_cuda and batch["image"].dtype == torch.float16
    assert np.asarray(batch["index"].cpu()).shape == (4,)


@pytest.mark.parametrize("size", [8, 20])
def test_reduced_size_decode_matches_a_full_decode(shards: Path, size: int) -> None:
    """Small crops take the DCT-scaled decode path; the result must still be the same crop."""
    import io

    from PIL import Image

    transform = dp.image.CenterCrop(size, fraction=1.0)
    with dp.Loader(shards, batch_size=23, num_workers=0, shuffle=False,
                   transform=transform) as loader:
        batch = next(iter(loader))
    with Dataset(shards) as ds:
        for j in range(0, 23, 5):
            row = ds[j]
            full = Image.open(io.BytesIO(row["image"].tobytes())).convert("RGB")
            side = min(full.size)
            box = ((full.width - side) // 2, (full.height - side) // 2)
            want = np.asarray(full.resize((size, size), Image.Resampling.BILINEAR,
                                          box=(*box, box[0] + side, box[1] + side)))
            got = batch["image"][j].permute(1, 2, 0).numpy()
            assert np.abs(got.astype(int) - want).mean() < 12


def test_next_epoch_is_prefetched_and_discarded_when_not_wanted(shards: Path) -> None:
    def epoch_of(loader: dp.Loader, epoch: int) -> list[int]:
        loader.set_epoch(epoch)
        return indices_of(list(loader))

    with dp.Loader(shards, batch_size=4, num_workers=2, transform=CROP) as fresh:
        want = {e: epoch_of(fresh, e) for e in (5, 1)}  # 5 then 1: never a carried epoch
    with dp.Loader(shards, batch_size=4, num_workers=2, transform=CROP) as loader:
        epoch_of(loader, 0)
        assert loader._producer._carry is not None, "epoch 1 started during epoch 0"
        assert epoch_of(loader, 1) == want[1]
        assert epoch_of(loader, 5) == want[5], "a carried epoch 2 is dropped for epoch 5"
