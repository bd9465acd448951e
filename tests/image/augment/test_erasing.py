"""RandomErasing: torchvision's and timm's box (ten tries, then none), what fills it, on uint8
and normalised pixels, per sample and per batch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from datapipe.errors import ArgumentError, DataError
from datapipe.image.augment import RandomErasing
from datapipe.image.augment.erasing import _DRAWS
from tests.image.augment.samples import photo


def normalised(height: int = 48, width: int = 64, seed: int = 0) -> np.ndarray:
    """H x W x 3 float32, as pixels are after a Normalize."""
    return (photo(height, width, seed).astype(np.float32) / 255 - 0.45) / 0.225


def torchvision_box(u: np.ndarray, height: int, width: int, scale, ratio):
    """torchvision's RandomErasing.get_params, its random numbers taken from u in order:
    (top, left, h, w) or None when it erases nothing."""
    if not u[0] < 1.0:
        return None
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for attempt in range(10):
        area = height * width * (scale[0] + u[1 + 2 * attempt] * (scale[1] - scale[0]))
        aspect = math.exp(log_ratio[0] + u[2 + 2 * attempt] * (log_ratio[1] - log_ratio[0]))
        h, w = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
        if not (h < height and w < width):
            continue
        return int(u[-2] * (height - h + 1)), int(u[-1] * (width - w + 1)), h, w
    return None


def erased_box(before: np.ndarray, after: np.ndarray) -> tuple[int, int, int, int]:
    rows, cols = np.nonzero(np.any(before != after, axis=-1))
    return rows.min(), cols.min(), rows.max() - rows.min() + 1, cols.max() - cols.min() + 1


@pytest.mark.parametrize("seed", range(8))
def test_the_box_is_torchvisions(seed: int) -> None:
    step = RandomErasing(p=1.0, value=(7.0, 8.0, 9.0))
    uniforms = np.random.default_rng(seed).random(_DRAWS)
    expected = torchvision_box(uniforms, 48, 64, step.scale, step.ratio)

    class Replay(np.random.Generator):
        def random(self, size=None):
            return uniforms.reshape(size)

    image = normalised()
    out = step.apply_sample(image, Replay(np.random.PCG64()))
    top, left, h, w = expected
    assert np.all(out[top:top + h, left:left + w] == np.float32([7, 8, 9]))
    assert erased_box(image, out) == expected
    assert image[0, 0, 0] == normalised()[0, 0, 0]  # a copy was erased, not the input


def test_no_fitting_box_no_erasing() -> None:
    # the whole image's area at aspect 1 is the whole square: never strictly inside it
    step = RandomErasing(p=1.0, scale=(1.0, 1.0), ratio=(1.0, 1.0), value=0)
    image = normalised(32, 32)
    assert step.apply_sample(image, np.random.default_rng(0)) is image
    batch = torch.from_numpy(np.stack([image] * 3)).permute(0, 3, 1, 2)
    out, _ = step.apply_batch(batch.clone(), None, torch.Generator().manual_seed(0))
    assert torch.equal(out, batch)


def test_random_fills_normal_noise_on_floats_and_random_bytes_on_uint8() -> None:
    step = RandomErasing(p=1.0, scale=(0.3, 0.33), value="random")
    image = normalised(96, 96)
    out = step.apply_sample(image, np.random.default_rng(3))
    patch = out[np.any(out != image, axis=-1)]
    assert out.dtype == np.float32 and len(patch) > 2000
    assert abs(patch.mean()) < 0.1 and abs(patch.std() - 1) < 0.1
    raw = photo(96, 96)
    out = step.apply_sample(raw, np.random.default_rng(3))
    assert out.dtype == np.uint8 and len(np.unique(out[np.any(out != raw, axis=-1)])) > 200


def test_a_number_fills_every_channel_and_bytes_are_clipped() -> None:
    out = RandomErasing(p=1.0, value=-1.5).apply_sample(normalised(), np.random.default_rng(0))
    assert (out == np.float32(-1.5)).all(axis=-1).sum() > 0
    out = RandomErasing(p=1.0, value=300).apply_sample(photo(), np.random.default_rng(0))
    assert (out == 255).all(axis=-1).sum() > 0


def test_the_batch_path_erases_one_box_per_image_within_scale_and_ratio() -> None:
    step = RandomErasing(p=1.0, scale=(0.1, 0.2), ratio=(0.5, 2.0), value=(5.0, 5.0, 5.0))
    images = np.stack([normalised(seed=s) for s in range(16)])
    batch = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()
    out, labels = step.apply_batch(batch.clone(), torch.arange(16),
                                   torch.Generator().manual_seed(1))
    out = out.permute(0, 2, 3, 1).numpy()
    for before, after in zip(images, out, strict=True):
        top, left, h, w = erased_box(before, after)
        assert np.all(after[top:top + h, left:left + w] == 5.0)  # one solid rectangle
        assert 0.1 * 0.9 <= h * w / (48 * 64) <= 0.2 * 1.1
        assert 0.5 * 0.8 <= h / w <= 2.0 * 1.25
    assert torch.equal(labels, torch.arange(16))


def test_probability_and_determinism_on_both_paths() -> None:
    step = RandomErasing(p=0.25)
    image = normalised()
    erased = [not np.array_equal(step.apply_sample(image, np.random.default_rng(s)), image)
              for s in range(400)]
    assert 0.18 < np.mean(erased) < 0.32
    again = step.apply_sample(image, np.random.default_rng(11))
    assert np.array_equal(step.apply_sample(image, np.random.default_rng(11)), again)
    batch = torch.from_numpy(np.stack([image] * 64)).permute(0, 3, 1, 2)
    one, _ = step.apply_batch(batch.clone(), None, torch.Generator().manual_seed(2))
    two, _ = step.apply_batch(batch.clone(), None, torch.Generator().manual_seed(2))
    assert torch.equal(one, two)
    changed = (one != batch).flatten(1).any(1).float().mean()
    assert 0.05 < changed < 0.5


def test_pixels_of_another_kind_are_refused() -> None:
    with pytest.raises(DataError, match="RandomErasing takes uint8 or float pixels, got uint16"):
        RandomErasing().apply_sample(photo().astype(np.uint16), np.random.default_rng(0))


@pytest.mark.parametrize(("make", "message"), [
    (lambda: RandomErasing(p=1.5), r"RandomErasing p must be a probability in \[0, 1\], got 1.5"),
    (lambda: RandomErasing(scale=(0.5, 0.2)), "RandomErasing scale must satisfy"),
    (lambda: RandomErasing(scale=(0, 0.2)), "RandomErasing scale must satisfy"),
    (lambda: RandomErasing(ratio=(-1, 2)), "RandomErasing ratio must be positive and ordered"),
    (lambda: RandomErasing(value="noise"), 'RandomErasing value must be "random", a number or '
                                           "an \\(r, g, b\\) triple of numbers, got 'noise'"),
    (lambda: RandomErasing(value=(1, 2)), "RandomErasing value must be"),
    (lambda: RandomErasing(value=math.nan), "RandomErasing value must be"),
])
def test_bad_arguments_are_refused_when_made(make, message) -> None:
    with pytest.raises(ArgumentError, match=message):
        make()


def test_needs_no_uint8() -> None:
    assert not RandomErasing.needs_uint8
