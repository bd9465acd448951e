"""PatchLoader's augmentation, run for real in worker processes on converted photos:
ColorJitter per image (each adjustment as the batched ColorJitter, kornia's, gives it on the
same decoded image), the user's PerSample (a NumPy function, with or without a generator, a
torch module), the sample-step recipes; all drawn from (seed, epoch, index), so reruns and
resumes give the same bits; steps that cannot keep an image's size refused by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import datapipe as dp
from datapipe.errors import ArgumentError, DataError
from datapipe.image.augment import color_jitter
from tests.loader.helpers import check_resume_at_every_step, indices_of
from tests.loader.patch_data import make_patch_dataset

COUNT = 12
PATCH = 16  # SigLIP2's
JITTER = dp.image.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 photos from 24 to 300 px a side, both orientations."""
    rng = np.random.default_rng(11)
    sizes = [(int(w), int(h)) for w, h in rng.integers(24, 300, size=(COUNT, 2))]
    return make_patch_dataset(tmp_path_factory.mktemp("patch_augment"), sizes)


# Module-level functions and modules: worker steps are pickled to the workers.
def invert(pixels: np.ndarray) -> np.ndarray:
    return 255 - pixels


def noise(pixels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return pixels ^ rng.integers(0, 256, pixels.shape, dtype=np.uint8)


def drop_row(pixels: np.ndarray) -> np.ndarray:
    return pixels[1:]


def refuse_tall(pixels: np.ndarray) -> np.ndarray:
    if pixels.shape[0] > pixels.shape[1]:
        raise ValueError("a tall image")
    return pixels


class TorchNoise(torch.nn.Module):
    """A torch module per image: CHW uint8 in and out, drawing from torch's global generator."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.dtype == torch.uint8 and x.shape[0] == 3
        return x ^ torch.randint(0, 256, x.shape, dtype=torch.uint8)


def siglip(photos: Path, **kwargs: object) -> dp.PatchLoader:
    return dp.PatchLoader(photos, "siglip2", **{"batch_size": 4, "max_num_patches": 64,
                                                 "shuffle": False, **kwargs})


def images_of(loader: dp.PatchLoader, epoch: int = 0) -> dict[int, np.ndarray]:
    """Each image of a SigLIP2 epoch back as the uint8 pixels that were patchified (mean and
    std 0.5: every byte comes back exactly)."""
    out = {}
    with loader:
        loader.set_epoch(epoch)
        for batch in loader:
            for j, index in enumerate(batch["index"].tolist()):
                rows, cols = batch["spatial_shapes"][j].tolist()
                patches = batch["pixel_values"][j, :rows * cols].numpy()
                tiles = patches.reshape(rows, cols, PATCH, PATCH, 3).transpose(0, 2, 1, 3, 4)
                pixels = np.rint((tiles.reshape(rows * PATCH, cols * PATCH, 3) + 1) * 127.5)
                out[index] = pixels.astype(np.uint8)
    return out


@pytest.mark.parametrize("path", ["C", "Pillow"])
@pytest.mark.parametrize("adjustment", [
    {"brightness": (1.5, 1.5)}, {"brightness": (0.6, 0.6)}, {"contrast": (0.5, 0.5)},
    {"contrast": (1.6, 1.6)}, {"saturation": (1.8, 1.8)}, {"saturation": (0.3, 0.3)},
    {"hue": (0.15, 0.15)}, {"hue": (-0.3, -0.3)}, {"hue": (0.3, 0.3)}])
def test_each_adjustment_equals_the_batched_color_jitter_on_the_same_image(
        photos: Path, adjustment: dict, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per image in the workers, on uint8 before normalisation, what kornia's ColorJitter (the
    loaders' batched form) gives in floats on the same decoded image: within 2 levels
    (torchvision's uint8 arithmetic floors the grey and truncates), 1.5 at most on average.
    Without the C extension, hue goes through Pillow's 8-bit HSV (torchvision's PIL path): a
    few levels on saturated pixels. The untouched image is 14 levels or more away from every
    reference here."""
    kornia = pytest.importorskip("kornia.augmentation")
    if path == "C":
        pytest.importorskip("datapipe.image._colour")
    else:  # set before the workers fork: they inherit it
        monkeypatch.setattr(color_jitter, "_adjust_c", None)
    plain = images_of(siglip(photos))
    jittered = images_of(siglip(photos, transform=dp.image.ColorJitter(**adjustment),
                                num_workers=2))
    reference = kornia.ColorJitter(**adjustment, p=1.0)
    errors = []
    for index, pixels in plain.items():
        floats = torch.from_numpy(pixels).permute(2, 0, 1)[None].float() / 255
        want = reference(floats)[0].permute(1, 2, 0).numpy() * 255
        error = np.abs(jittered[index].astype(np.float64) - want)
        errors.append(error.mean())
        assert error.max() <= (10 if "hue" in adjustment and path == "Pillow" else 2), \
            (index, error.max())
        assert not np.array_equal(jittered[index], pixels)
    assert max(errors) < 1.5, errors


def test_jitter_is_drawn_per_seed_epoch_and_index(photos: Path) -> None:
    """The same image gets the same jitter in another batch, order and worker count; another
    epoch or seed draws anew."""
    first = images_of(siglip(photos, transform=JITTER))
    shuffled = images_of(siglip(photos, transform=JITTER, shuffle=True, batch_size=3,
                                num_workers=2))
    assert all(np.array_equal(first[i], shuffled[i]) for i in range(COUNT))
    later = images_of(siglip(photos, transform=JITTER), epoch=1)
    reseeded = images_of(siglip(photos, transform=JITTER, seed=5))
    for other in (later, reseeded):
        assert sum(not np.array_equal(first[i], other[i]) for i in range(COUNT)) >= COUNT - 1


@pytest.mark.parametrize("preset", ["siglip2", "qwen2_vl"])
def test_resume_with_augmentation_is_exact(photos: Path, preset: str) -> None:
    transform = JITTER | dp.PerSample(noise) | dp.PerSample(TorchNoise())
    size = {"batch_size": 4, "max_num_patches": 64} if preset == "siglip2" else \
        {"max_patches": 2048}
    check_resume_at_every_step(lambda: dp.PatchLoader(
        photos, preset, transform=transform, flip=True, num_workers=2, **size), epoch=1)


def test_the_users_function_runs_on_each_image_at_its_planned_size(photos: Path) -> None:
    """Packed Qwen2-VL batches: the function's bytes are what gets normalised and laid out."""
    processor = dict(mean=np.array((0.48145466, 0.4578275, 0.40821073)),
                     std=np.array((0.26862954, 0.26130258, 0.27577711)))

    def patch_bytes(transform: object) -> dict[int, np.ndarray]:
        with dp.PatchLoader(photos, "qwen2_vl", max_patches=2048, shuffle=False,
                            num_workers=2, transform=transform) as loader:
            out = {}
            for batch in loader:
                cu = batch["cu_seqlens"].tolist()
                for j, index in enumerate(batch["index"].tolist()):
                    values = batch["pixel_values"][cu[j]:cu[j + 1]].double().numpy()
                    scale = {k: np.repeat(v, 2 * 14 * 14) for k, v in processor.items()}
                    out[index] = np.rint((values * scale["std"] + scale["mean"]) * 255)
            return out

    plain, inverted = patch_bytes(None), patch_bytes(dp.PerSample(invert))
    assert sorted(inverted) == list(range(COUNT))
    for index in range(COUNT):
        assert np.array_equal(inverted[index], 255 - plain[index]), index


def test_recipes_run_per_image_too(photos: Path) -> None:
    plain = images_of(siglip(photos))
    augmented = images_of(siglip(photos, transform=dp.TrivialAugmentWide(), num_workers=2))
    assert augmented.keys() == plain.keys()
    assert sum(not np.array_equal(plain[i], augmented[i]) for i in plain) >= COUNT // 2
    again = images_of(siglip(photos, transform=dp.TrivialAugmentWide()))
    assert all(np.array_equal(augmented[i], again[i]) for i in plain)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_step_that_changes_the_size_is_refused_naming_it(photos: Path, workers: int) -> None:
    with siglip(photos, transform=dp.PerSample(drop_row), num_workers=workers) as loader, \
            pytest.raises(ArgumentError, match=r"^PerSample\(drop_row\) returned \d+x\d+x3 "
                                               r"uint8 pixels for an image of \d+x\d+x3 uint8: "
                                               r"a step must keep the image's size") as err:
        list(loader)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("step", "message"), [
    (dp.image.RandomResizedCrop(64), r"^RandomResizedCrop cannot run in PatchLoader's "
                                     r"transform: each image's patch grid is planned"),
    (dp.image.CenterCrop(64), r"^CenterCrop cannot run .* resize rule"),
    (dp.image.HorizontalFlip(), r"^HorizontalFlip cannot run .* pass flip=True"),
    (dp.image.Normalize(), r"^Normalize cannot run .* image_mean / image_std"),
    (dp.PerSample(invert, shape=(32, 32)), r"^PerSample\(invert\) cannot run .* shape="),
    (dp.PerSample(invert, dtype="float32"), r"^PerSample\(invert\) cannot run .* uint8"),
    (dp.PerBatch(invert), r"^PerBatch\(invert\) cannot run .* whole batches of images"),
    (dp.Mixup(num_classes=2), r"^Mixup cannot run .* whole batches of images"),
    (dp.PerSample(lambda pixels: pixels), r"cannot be sent to worker processes"),
])
def test_steps_that_cannot_run_on_patches_are_refused_when_made(photos: Path, step: object,
                                                               message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        siglip(photos, transform=dp.image.ColorJitter(0.2) | step, num_workers=2)


def test_a_failing_step_names_the_sample_or_is_skipped(photos: Path) -> None:
    with siglip(photos) as loader:
        tall = {i for b in loader for i, (r, c) in zip(b["index"].tolist(),
                                                        b["spatial_shapes"].tolist(),
                                                        strict=True) if r > c}
    assert 0 < len(tall) < COUNT
    transform = dp.PerSample(refuse_tall)
    with siglip(photos, transform=transform, num_workers=2) as loader, \
            pytest.raises(DataError, match=r"row \d+ \(sample \d+\): PerSample\(refuse_tall\) "
                                           r"failed: ValueError: a tall image"):
        list(loader)
    with siglip(photos, transform=transform, on_error="skip") as loader, \
            pytest.warns(UserWarning, match=f"skipped {len(tall)}"):
        batches = list(loader)
    assert sorted(indices_of(batches)) == sorted(set(range(COUNT)) - tall)
    assert {i for i, _ in loader.skipped} == tall


def test_the_profiler_names_each_step(photos: Path) -> None:
    with siglip(photos, transform=JITTER | dp.PerSample(noise), num_workers=2) as loader, \
            dp.profile() as prof:
        for _ in prof.wrap(loader):
            prof.step()
    stages = prof.results()["stages"]["worker_seconds"]
    assert "ColorJitter" in stages and "PerSample(noise)" in stages
