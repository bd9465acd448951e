"""Mixup and CutMix: images and soft targets against a reference written from timm's
`timm/data/mixup.py` (lam from Beta, the cutmix box and correct_lam, one-hot smoothing), fed
the same random numbers: Mixup draws from a NumPy generator seeded from the batch's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datapipe.errors import ArgumentError, DataError
from datapipe.image.augment import Mixup

CLASSES = 10


def batch(count: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(count, 3, 20, 28, generator=g), torch.randint(CLASSES, (count,),
                                                                    generator=g)


def numpy_stream(seed: int) -> np.random.Generator:
    """The NumPy generator Mixup seeds from torch.Generator().manual_seed(seed)."""
    g = torch.Generator().manual_seed(seed)
    return np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=g)))


def timm_target(labels: torch.Tensor, lam: torch.Tensor, smoothing: float) -> torch.Tensor:
    off = smoothing / CLASSES
    on = 1.0 - smoothing + off
    y1 = torch.full((len(labels), CLASSES), off).scatter_(1, labels.view(-1, 1), on)
    y2 = torch.full((len(labels), CLASSES), off).scatter_(1, labels.flip(0).view(-1, 1), on)
    return y1 * lam + y2 * (1.0 - lam)


def timm_bbox(rng: np.random.Generator, shape, lam, count=None):
    ratio = np.sqrt(1 - lam)
    img_h, img_w = shape[-2:]
    cut_h, cut_w = (img_h * ratio).astype(int), (img_w * ratio).astype(int)
    cy, cx = rng.integers(0, img_h, size=count), rng.integers(0, img_w, size=count)
    return (np.clip(cy - cut_h // 2, 0, img_h), np.clip(cy + cut_h // 2, 0, img_h),
            np.clip(cx - cut_w // 2, 0, img_w), np.clip(cx + cut_w // 2, 0, img_w))


def timm_batch_mode(x, labels, rng, mixup_alpha, cutmix_alpha, prob, switch_prob, smoothing):
    """timm's Mixup._mix_batch and mixup_target (correct_lam=True, no cutmix_minmax)."""
    x = x.clone()
    lam, use_cutmix = 1.0, False
    if rng.random() < prob:
        if mixup_alpha > 0 and cutmix_alpha > 0:
            use_cutmix = rng.random() < switch_prob
            lam = rng.beta(cutmix_alpha, cutmix_alpha) if use_cutmix else \
                rng.beta(mixup_alpha, mixup_alpha)
        elif mixup_alpha > 0:
            lam = rng.beta(mixup_alpha, mixup_alpha)
        else:
            use_cutmix, lam = True, rng.beta(cutmix_alpha, cutmix_alpha)
    if lam != 1.0:
        if use_cutmix:
            yl, yh, xl, xh = timm_bbox(rng, x.shape, lam)
            lam = 1.0 - (yh - yl) * (xh - xl) / float(x.shape[-2] * x.shape[-1])
            x[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh]
        else:
            x = x * lam + x.flip(0) * (1.0 - lam)
    return x, timm_target(labels, torch.tensor(float(lam)), smoothing)


def timm_elem_mode(x, labels, rng, mixup_alpha, cutmix_alpha, prob, switch_prob, smoothing,
                   pair):
    """timm's Mixup._mix_elem / _mix_pair, the cutmix boxes drawn together (rand_bbox with
    count) rather than one by one."""
    count = len(x) // 2 if pair else len(x)
    use_cutmix = rng.random(count) < switch_prob
    lam_mix = np.where(use_cutmix, rng.beta(cutmix_alpha, cutmix_alpha, size=count),
                       rng.beta(mixup_alpha, mixup_alpha, size=count))
    lam = np.where(rng.random(count) < prob, lam_mix, 1.0)
    cut = use_cutmix & (lam != 1.0)
    boxes = np.zeros((count, 4), dtype=int)
    if cut.any():
        yl, yh, xl, xh = timm_bbox(rng, x.shape, lam[cut], count=int(cut.sum()))
        boxes[cut] = np.stack([yl, yh, xl, xh], axis=1)
        lam[cut] = 1.0 - (yh - yl) * (xh - xl) / float(x.shape[-2] * x.shape[-1])
    orig, x = x, x.clone()
    for i in range(count):
        j = len(x) - i - 1
        if lam[i] == 1.0:
            continue
        yl, yh, xl, xh = boxes[i]
        for a, b in ((i, j), (j, i)) if pair else ((i, j),):
            if cut[i]:
                x[a][:, yl:yh, xl:xh] = orig[b][:, yl:yh, xl:xh]
            else:
                x[a] = orig[a] * lam[i] + orig[b] * (1 - lam[i])
    if pair:
        lam = np.concatenate((lam, lam[::-1]))
    return x, timm_target(labels, torch.tensor(lam, dtype=torch.float32).unsqueeze(1), smoothing)


SETTINGS = [  # mixup_alpha, cutmix_alpha, prob, switch_prob, label_smoothing
    (0.8, 1.0, 1.0, 0.5, 0.1), (0.2, 0.0, 1.0, 0.5, 0.0), (0.0, 1.0, 0.7, 0.5, 0.2),
    (0.8, 1.0, 0.5, 0.8, 0.1),
]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("setting", SETTINGS, ids=str)
def test_batch_mode_is_timms(setting, seed: int) -> None:
    mixup_alpha, cutmix_alpha, prob, switch_prob, smoothing = setting
    step = Mixup(mixup_alpha, cutmix_alpha, prob=prob, switch_prob=switch_prob,
                 label_smoothing=smoothing, num_classes=CLASSES)
    images, labels = batch(seed=seed)
    expected_x, expected_y = timm_batch_mode(images, labels, numpy_stream(seed), *setting)
    out_x, out_y = step.apply_batch(images.clone(), labels, torch.Generator().manual_seed(seed))
    torch.testing.assert_close(out_x, expected_x)
    torch.testing.assert_close(out_y, expected_y)
    assert out_y.dtype == torch.float32 and out_y.shape == (8, CLASSES)
    torch.testing.assert_close(out_y.sum(1), torch.ones(8))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mode", ["elem", "pair"])
@pytest.mark.parametrize("setting", SETTINGS[:1] + SETTINGS[3:], ids=str)
def test_elem_and_pair_modes_are_timms(setting, mode: str, seed: int) -> None:
    step = Mixup(*setting[:2], prob=setting[2], switch_prob=setting[3],
                 label_smoothing=setting[4], mode=mode, num_classes=CLASSES)
    images, labels = batch(seed=seed)
    expected_x, expected_y = timm_elem_mode(images, labels, numpy_stream(seed), *setting,
                                            pair=mode == "pair")
    out_x, out_y = step.apply_batch(images.clone(), labels, torch.Generator().manual_seed(seed))
    torch.testing.assert_close(out_x, expected_x)
    torch.testing.assert_close(out_y, expected_y)
    torch.testing.assert_close(out_y.sum(1), torch.ones(8))


def test_cutmix_minmax_boxes_and_lam() -> None:
    step = Mixup(mixup_alpha=0.0, cutmix_alpha=0.0, cutmix_minmax=(0.2, 0.5), num_classes=3,
                 label_smoothing=0.0)
    assert step.cutmix_alpha == 1.0  # as timm: a minmax means cutmix
    plan = step.plan(np.random.default_rng(0), 8, 100, 100)
    yl, yh, xl, xh = plan.boxes[0]
    assert plan.cut.all() and 20 <= yh - yl < 50 and 20 <= xh - xl < 50
    assert plan.lam[0] == pytest.approx(1 - (yh - yl) * (xh - xl) / 10000)


def test_an_odd_batch_in_pair_mode_leaves_its_middle_image() -> None:
    step = Mixup(mixup_alpha=1.0, cutmix_alpha=0.0, mode="pair", num_classes=CLASSES)
    images, labels = batch(count=7)
    out_x, out_y = step.apply_batch(images.clone(), labels, torch.Generator().manual_seed(0))
    assert torch.equal(out_x[3], images[3])
    assert out_y[3, labels[3]] == pytest.approx(0.9 + 0.01)
    torch.testing.assert_close(out_y.sum(1), torch.ones(7))


def test_soft_labels_are_mixed_as_they_are() -> None:
    step = Mixup(mixup_alpha=1.0, cutmix_alpha=0.0, num_classes=CLASSES)
    images, _ = batch()
    soft = torch.softmax(torch.randn(8, CLASSES), dim=1)
    _, out = step.apply_batch(images, soft, torch.Generator().manual_seed(0))
    lam = (out - soft.flip(0)) / (soft - soft.flip(0))
    assert torch.allclose(lam, lam[0, 0].expand_as(lam), atol=1e-4)


def test_same_seed_same_batch() -> None:
    step = Mixup(mode="elem", num_classes=CLASSES)
    images, labels = batch()
    one = step.apply_batch(images.clone(), labels, torch.Generator().manual_seed(3))
    two = step.apply_batch(images.clone(), labels, torch.Generator().manual_seed(3))
    three = step.apply_batch(images.clone(), labels, torch.Generator().manual_seed(4))
    assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])
    assert not torch.equal(one[0], three[0])


@pytest.mark.parametrize(("labels", "message"), [
    (torch.tensor([0, 1, 2, 10, 3, 4, 5, 6]), r"Mixup: label 10 is outside \[0, 10\) "
                                              r"\(num_classes=10\)"),
    (torch.tensor([0, -1, 2, 3, 3, 4, 5, 6]), "Mixup: label -1 is outside"),
    (None, "Mixup needs one label per image, got none for 8 images"),
    (torch.zeros(8, 4), r"Mixup: float labels must be \(8, 10\) targets, got \(8, 4\)"),
])
def test_bad_labels_are_data_errors(labels, message) -> None:
    with pytest.raises(DataError, match=message):
        Mixup(num_classes=CLASSES).apply_batch(batch()[0], labels, torch.Generator())


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Mixup(), "Mixup num_classes must be the number of classes, at least 2 .* got None"),
    (lambda: Mixup(num_classes=1), "Mixup num_classes must be"),
    (lambda: Mixup(num_classes=10.0), "Mixup num_classes must be"),
    (lambda: Mixup(mixup_alpha=-1, num_classes=10), "Mixup mixup_alpha must be a finite number"),
    (lambda: Mixup(0.0, 0.0, num_classes=10), "Mixup needs mixup_alpha > 0, cutmix_alpha > 0"),
    (lambda: Mixup(prob=2, num_classes=10), r"Mixup prob must be a probability in \[0, 1\]"),
    (lambda: Mixup(switch_prob=-0.1, num_classes=10), "Mixup switch_prob must be"),
    (lambda: Mixup(mode="batches", num_classes=10), "Mixup mode must be one of batch, pair, "
                                                    "elem, got 'batches'"),
    (lambda: Mixup(label_smoothing=1.0, num_classes=10), "Mixup label_smoothing must be"),
    (lambda: Mixup(cutmix_minmax=(0.5, 0.2), num_classes=10), "Mixup cutmix_minmax must be"),
    (lambda: Mixup(correct_lam=1, num_classes=10), "Mixup correct_lam must be a bool"),
])
def test_bad_arguments_are_refused_when_made(make, message) -> None:
    with pytest.raises(ArgumentError, match=message):
        make()
