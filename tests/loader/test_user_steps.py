"""The user's own steps run for real: per sample in worker processes, per batch after the
hand-off; reproducible from (seed, epoch, sample or batch), through a resume, and refused or
named when they misbehave."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import datapipe as dp
from datapipe.errors import ArgumentError, DataError
from datapipe.loader.workers import WorkerCause
from tests.conftest import convert
from tests.imagegen import make_image_folder
from tests.loader.helpers import check_resume_at_every_step, same_batch

CROP = dp.image.RandomResizedCrop(32) | dp.image.HorizontalFlip()


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """14 samples over uneven shards."""
    root = tmp_path_factory.mktemp("user-steps")
    src = make_image_folder(root / "src", classes=2, per_class=7, size=(72, 48))
    convert("images", src, root / "out", "--short-side", "48", "--shard-size", "9KB")
    return root / "out"


# Module-level functions: worker steps are pickled to the workers.
def noise(pixels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return (pixels ^ rng.integers(0, 256, pixels.shape, dtype=np.uint8)).astype(np.uint8)


def global_noise(pixels: np.ndarray) -> np.ndarray:
    """Draws from NumPy's and torch's global generators, as much user code does."""
    shift = np.random.randint(0, 256) + int(torch.randint(0, 256, ()))
    return (pixels.astype(np.int64) + shift).astype(np.uint8)


def mix_labels(images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A Mixup-like batch function: a random permutation mixed in, soft two-class targets."""
    order = torch.randperm(images.shape[0])
    target = torch.nn.functional.one_hot(labels, 2).float()
    return (images + images[order]) / 2, (target + target[order]) / 2


def shuffle_pixels(images: torch.Tensor) -> torch.Tensor:
    return images + torch.rand(images.shape[0], 1, 1, 1, device=images.device)


def loader_of(shards: Path, transform, workers: int = 2, **kwargs) -> dp.Loader:
    return dp.Loader(shards, batch_size=4, num_workers=workers, seed=3, transform=transform,
                     **kwargs)


def batches(shards: Path, transform, workers: int = 2, epoch: int = 0, **kwargs) -> list[dict]:
    with loader_of(shards, transform, workers, **kwargs) as loader:
        loader.set_epoch(epoch)
        return list(loader)


def same_batches(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(same_batch(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("fn", [noise, global_noise])
def test_a_per_sample_function_is_reproducible_whichever_worker_runs_it(shards: Path,
                                                                         fn) -> None:
    transform = CROP | dp.PerSample(fn)
    first = batches(shards, transform)
    assert same_batches(first, batches(shards, transform)), "same seed, same bits"
    assert same_batches(first, batches(shards, transform, workers=0)), "any worker"
    plain = batches(shards, CROP)
    assert not any(torch.equal(a["image"], b["image"]) for a, b in zip(first, plain,
                                                                       strict=True))
    assert not same_batches(first, batches(shards, transform, epoch=1))


def test_a_per_sample_function_resumes_mid_epoch_exactly(shards: Path) -> None:
    check_resume_at_every_step(lambda: loader_of(shards, CROP | dp.PerSample(noise)), epoch=1)


def test_a_per_sample_function_leaves_the_callers_generators_alone(shards: Path) -> None:
    torch.manual_seed(5)
    np.random.seed(5)
    batches(shards, CROP | dp.PerSample(global_noise), workers=0)
    after = (int(torch.randint(0, 10**6, ())), np.random.randint(10**6))
    torch.manual_seed(5)
    np.random.seed(5)
    assert after == (int(torch.randint(0, 10**6, ())), np.random.randint(10**6))


def halve(pixels: np.ndarray) -> np.ndarray:
    assert pixels.dtype == np.float32, "after Normalize the step gets floats"
    return pixels / 2


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_float_step_after_normalize_gets_the_normalised_pixels(shards: Path,
                                                                 dtype: str) -> None:
    norm = dp.image.Normalize(dtype=dtype)
    plain = batches(shards, CROP | dp.image.Normalize())
    halved = batches(shards, CROP | norm | dp.PerSample(halve))
    for got, want in zip(halved, plain, strict=True):
        assert got["image"].dtype == getattr(torch, dtype)
        assert torch.equal(got["image"], (want["image"] / 2).to(getattr(torch, dtype)))


def to_sixteen(pixels: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(pixels[::2, ::2])


def test_a_declared_shape_sets_the_batch_shape(shards: Path) -> None:
    got = batches(shards, CROP | dp.PerSample(to_sixteen, shape=(16, 16)))
    assert got[0]["image"].shape == (4, 3, 16, 16)


def wrong_dtype(pixels: np.ndarray) -> np.ndarray:
    return pixels.astype(np.float32)


def wrong_shape(pixels: np.ndarray) -> np.ndarray:
    return pixels[1:]


def not_an_array(pixels: np.ndarray) -> list:
    return pixels.tolist()


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(("fn", "message"), [
    (wrong_dtype, r"PerSample\(wrong_dtype\) returned 32x32x3 float32 pixels; this loader "
                  r"expects 32x32x3 uint8 there \(declare it with shape= / dtype=\)"),
    (wrong_shape, r"PerSample\(wrong_shape\) returned 31x32x3 uint8 pixels"),
    (not_an_array, r"PerSample\(not_an_array\) returned list, not an array of 32x32x3 uint8"),
])
def test_a_wrong_output_is_refused_in_one_line_naming_the_step(shards: Path, fn, message: str,
                                                               workers: int) -> None:
    with loader_of(shards, CROP | dp.PerSample(fn), workers) as loader, \
            pytest.raises(ArgumentError, match=message) as err:
        next(iter(loader))
    assert "\n" not in str(err.value)


def failing(pixels: np.ndarray) -> np.ndarray:
    raise ZeroDivisionError("the user's bug")


@pytest.mark.parametrize("workers", [0, 2])
def test_a_raising_function_names_sample_shard_row_and_step(shards: Path, workers: int) -> None:
    transform = dp.image.CenterCrop(32) | dp.PerSample(failing)
    with loader_of(shards, transform, workers, shuffle=False) as loader, \
            pytest.raises(DataError) as err:
        next(iter(loader))
    message = str(err.value)
    assert message.startswith("shard-00000") and " row 0 (sample 0): PerSample(failing) " \
        "failed: ZeroDivisionError: the user's bug" in message and "\n" not in message
    cause = err.value.__cause__
    if workers:  # the original crossed processes as its traceback
        assert isinstance(cause, WorkerCause) and "ZeroDivisionError" in str(cause)
    else:
        assert isinstance(cause, ZeroDivisionError)


def fail_on_odd(pixels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if rng.random() < 0.5:
        raise ValueError("odd")
    return pixels


def test_on_error_skip_skips_and_counts_a_failing_sample(shards: Path) -> None:
    transform = dp.image.CenterCrop(32) | dp.PerSample(fail_on_odd)
    with loader_of(shards, transform, on_error="skip") as loader, \
            pytest.warns(UserWarning, match="skipped"):
        seen = [int(i) for b in loader for i in b["index"]]
    skipped = [index for index, _ in loader.skipped]
    assert skipped and sorted(seen + skipped) == list(range(14))
    assert all("PerSample(fail_on_odd) failed: ValueError: odd" in why
               for _, why in loader.skipped)


def test_an_unpicklable_function_with_workers_is_refused_at_construction(shards: Path) -> None:
    step = dp.PerSample(lambda pixels: pixels, name="identity")
    with pytest.raises(ArgumentError, match=r"PerSample\(identity\) cannot be sent to worker "
                                            r"processes .* or pass num_workers=0"):
        loader_of(shards, CROP | step)
    assert len(batches(shards, CROP | step, workers=0)) == 4  # in-process needs no pickling


class FakeV2Flip:
    """Behaves as a torchvision.transforms.v2 transform: a CHW uint8 tensor in and out,
    randomness from torch's global generator."""

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        assert image.dtype == torch.uint8 and image.shape[0] == 3
        return image.flip(-1) if torch.rand(()) < 0.5 else image.clone()

    def __reduce__(self) -> tuple:
        return (fake_v2_flip, ())  # the class's module is made up: pickle by a real function


def fake_v2_flip() -> FakeV2Flip:
    return FakeV2Flip()


FakeV2Flip.__module__ = "torchvision.transforms.v2._geometry"


def test_a_torchvision_v2_transform_is_called_on_chw_tensors(shards: Path) -> None:
    plain = dp.image.CenterCrop(32)
    transform = plain | dp.PerSample(FakeV2Flip())
    got, base = batches(shards, transform, shuffle=False), batches(shards, plain, shuffle=False)
    assert same_batches(got, batches(shards, transform, shuffle=False))
    flipped = 0
    for g, b in zip(got, base, strict=True):
        for image, original in zip(g["image"], b["image"], strict=True):
            assert torch.equal(image, original) or torch.equal(image, original.flip(-1))
            flipped += not torch.equal(image, original)
    assert 0 < flipped < 14


@pytest.mark.parametrize("workers", [0, 2])
def test_a_per_batch_function_changes_labels_and_is_reproducible(shards: Path,
                                                                 workers: int) -> None:
    transform = CROP | dp.PerBatch(mix_labels)
    first = batches(shards, transform, workers)
    assert same_batches(first, batches(shards, transform, workers))
    for batch in first:
        assert batch["image"].dtype == torch.float32
        assert batch["label"].shape == (len(batch["index"]), 2)
        assert torch.allclose(batch["label"].sum(1), torch.ones(len(batch["label"])))
    with loader_of(shards, transform, workers, fields=("image", "label")) as loader:
        for images, target in loader:
            assert images.shape[1:] == (3, 32, 32) and target.dtype == torch.float32


def test_a_per_batch_function_resumes_mid_epoch_exactly(shards: Path) -> None:
    check_resume_at_every_step(lambda: loader_of(shards, CROP | dp.PerBatch(shuffle_pixels)),
                               epoch=2)


def test_kornia_augmentation_sequential_runs_as_it_is(shards: Path) -> None:
    kornia = pytest.importorskip("kornia")
    aug = kornia.augmentation.AugmentationSequential(
        kornia.augmentation.RandomHorizontalFlip(), kornia.augmentation.RandomGrayscale(p=0.5))
    transform = dp.image.CenterCrop(32) | dp.PerBatch(aug)
    first = batches(shards, transform)
    assert same_batches(first, batches(shards, transform))
    assert first[0]["image"].shape == (4, 3, 32, 32) and first[0]["image"].dtype == torch.float32
    plain = batches(shards, dp.image.CenterCrop(32))
    assert any(not torch.equal(a["image"], b["image"].float() / 255)
               for a, b in zip(first, plain, strict=True))


def test_the_profiler_names_a_per_batch_stage(shards: Path) -> None:
    with loader_of(shards, CROP | dp.PerBatch(shuffle_pixels, name="jitter")) as loader, \
            dp.profile() as prof:
        for _ in prof.wrap(loader):
            prof.step()
    assert "PerBatch(jitter)" in prof.results()["stages"]["main_seconds"]


def test_the_profiler_names_a_per_sample_stage(shards: Path) -> None:
    with loader_of(shards, CROP | dp.PerSample(noise)) as loader, dp.profile() as prof:
        for _ in prof.wrap(loader):
            prof.step()
    assert "PerSample(noise)" in prof.results()["stages"]["worker_seconds"]


class DeviceProbe(dp.SampleStep, dp.BatchStep):
    """Both forms: on CUDA the batch form must run, on the GPU, with a generator there."""

    def apply_sample(self, pixels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise AssertionError("the sample form ran for a batch going to CUDA")

    def apply_batch(self, images, labels, generator):
        assert images.is_cuda and generator.device.type == "cuda"
        return images * 0, labels


def test_on_cuda_batch_steps_run_on_the_gpu(shards: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    transform = CROP | dp.PerSample(noise) | DeviceProbe() | dp.PerBatch(mix_labels)
    first = batches(shards, transform, device="cuda")
    assert same_batches(first, batches(shards, transform, device="cuda"))
    batch = first[0]
    assert batch["image"].is_cuda and not batch["image"].any()
    assert batch["label"].is_cuda and batch["label"].shape == (4, 2)
    views = (CROP, dp.image.RandomResizedCrop(16) | dp.PerBatch(shuffle_pixels))
    with dp.Loader(shards, batch_size=4, num_workers=2, views=views, device="cuda") as loader:
        big, small = next(iter(loader))["image"]
    assert big.is_cuda and big.dtype == torch.uint8 and big.shape == (4, 3, 32, 32)
    assert small.is_cuda and small.dtype == torch.float32 and small.shape == (4, 3, 16, 16)
