"""Mixup and CutMix with soft targets, with timm's semantics (`timm.data.Mixup`).

Each image is mixed with its partner in the batch flipped end to end (image i with image
N - 1 - i), by a weight lam drawn from Beta(alpha, alpha): mixup blends the two, cutmix pastes
the partner's box of area about 1 - lam (lam then corrected to the box as clipped to the image,
`correct_lam`). The labels become (N, num_classes) float32 targets, lam of one's own smoothed
one-hot and 1 - lam of the partner's: each row sums to 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from datapipe.errors import ArgumentError, DataError
from datapipe.image.steps import BatchStep
from datapipe.image.transforms import _is_real, _reals

MODES = ("batch", "pair", "elem")


@dataclass(frozen=True)
class MixPlan:
    """Per image: its weight lam, whether it is cut (else blended), its box (yl, yh, xl, xh)."""

    lam: np.ndarray
    cut: np.ndarray
    boxes: np.ndarray


@dataclass(frozen=True)
class Mixup(BatchStep):
    """timm's `Mixup(mixup_alpha, cutmix_alpha, cutmix_minmax, prob, switch_prob, mode,
    correct_lam, label_smoothing, num_classes)`; mode "batch" mixes the whole batch with one
    lam, "pair" each pair (i, N - 1 - i), "elem" each image with its own."""

    mixup_alpha: float = 0.8
    cutmix_alpha: float = 1.0
    cutmix_minmax: tuple[float, float] | None = None
    prob: float = 1.0
    switch_prob: float = 0.5
    mode: str = "batch"
    correct_lam: bool = True
    label_smoothing: float = 0.1
    num_classes: int | None = None

    def __post_init__(self) -> None:
        for name in ("mixup_alpha", "cutmix_alpha"):
            _check(name, getattr(self, name), _is_real(getattr(self, name)) and
                   getattr(self, name) >= 0, "a finite number >= 0")
        if self.cutmix_minmax is not None:
            pair = _reals(self.cutmix_minmax, 2)
            _check("cutmix_minmax", self.cutmix_minmax,
                   pair is not None and 0 < pair[0] < pair[1] <= 1,
                   "None or (lo, hi) with 0 < lo < hi <= 1")
            object.__setattr__(self, "cutmix_minmax", pair)
            object.__setattr__(self, "cutmix_alpha", 1.0)  # as timm: minmax means cutmix
        if self.mixup_alpha == 0 and self.cutmix_alpha == 0:
            raise ArgumentError("Mixup needs mixup_alpha > 0, cutmix_alpha > 0 or "
                                "cutmix_minmax: as given it mixes nothing")
        for name in ("prob", "switch_prob"):
            value = getattr(self, name)
            _check(name, value, _is_real(value) and 0 <= value <= 1, "a probability in [0, 1]")
        _check("mode", self.mode, self.mode in MODES, f"one of {', '.join(MODES)}")
        _check("correct_lam", self.correct_lam, isinstance(self.correct_lam, bool), "a bool")
        _check("label_smoothing", self.label_smoothing,
               _is_real(self.label_smoothing) and 0 <= self.label_smoothing < 1,
               "a number in [0, 1)")
        classes = self.num_classes
        _check("num_classes", classes, isinstance(classes, int) and not isinstance(classes, bool)
               and classes >= 2, "the number of classes, at least 2 (it sizes the targets)")

    def apply_batch(self, images: torch.Tensor, labels: torch.Tensor | None,
                    generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Mixes `images` in place; returns them and the (N, num_classes) float32 targets."""
        targets = self._one_hot(labels, len(images), images.device)
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
        plan = self.plan(np.random.default_rng(seed), len(images), *images.shape[-2:])
        if self.mode == "batch":
            _mix_whole_batch(images, float(plan.lam[0]), bool(plan.cut[0]), plan.boxes[0])
        else:
            _mix_images(images, plan)
        lam = torch.from_numpy(plan.lam).to(images.device, torch.float32)[:, None]
        return images, targets * lam + targets.flip(0) * (1 - lam)

    def plan(self, rng: np.random.Generator, count: int, height: int, width: int) -> MixPlan:
        """timm's draws, in timm's order, from `rng`: lam (and whether to cut) for the batch, per
        pair or per image (`mode`), then the boxes of those that cut. Per pair or per image the
        boxes are drawn together (timm's `rand_bbox` with a count), not one by one."""
        if self.mode == "batch":
            lam, cut = self._batch_lam(rng)
        else:
            lam, cut = self._elem_lams(rng, count // 2 if self.mode == "pair" else count)
        cut &= lam != 1.0
        boxes = np.zeros((len(lam), 4), dtype=np.int64)
        if cut.any():
            boxes[cut] = self._boxes(rng, lam[cut], height, width)
            if self.correct_lam or self.cutmix_minmax is not None:
                area = (boxes[cut, 1] - boxes[cut, 0]) * (boxes[cut, 3] - boxes[cut, 2])
                lam[cut] = 1.0 - area / (height * width)
        at = np.arange(count)
        if self.mode == "batch":
            draw = np.zeros(count, dtype=np.int64)
        elif self.mode == "elem":
            draw = at
        else:  # image i and its partner N - 1 - i share draw i; an odd batch's middle is unmixed
            draw = np.minimum(at, count - 1 - at)
        mixed = draw < len(lam)
        draw = np.where(mixed, draw, 0)
        return MixPlan(np.where(mixed, lam[draw], 1.0), cut[draw] & mixed, boxes[draw])

    def _batch_lam(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """timm's `_params_per_batch`."""
        lam, cut = 1.0, False
        if rng.random() < self.prob:
            if self.mixup_alpha > 0 and self.cutmix_alpha > 0:
                cut = rng.random() < self.switch_prob
                alpha = self.cutmix_alpha if cut else self.mixup_alpha
            else:
                cut = self.mixup_alpha == 0
                alpha = self.cutmix_alpha if cut else self.mixup_alpha
            lam = rng.beta(alpha, alpha)
        return np.array([lam]), np.array([cut])

    def _elem_lams(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
        """timm's `_params_per_elem`."""
        if self.mixup_alpha > 0 and self.cutmix_alpha > 0:
            cut = rng.random(count) < self.switch_prob
            lam = np.where(cut, rng.beta(self.cutmix_alpha, self.cutmix_alpha, count),
                           rng.beta(self.mixup_alpha, self.mixup_alpha, count))
        elif self.mixup_alpha > 0:
            cut, lam = np.zeros(count, bool), rng.beta(self.mixup_alpha, self.mixup_alpha, count)
        else:
            cut, lam = np.ones(count, bool), rng.beta(self.cutmix_alpha, self.cutmix_alpha, count)
        return np.where(rng.random(count) < self.prob, lam, 1.0), cut

    def _boxes(self, rng: np.random.Generator, lam: np.ndarray, height: int,
               width: int) -> np.ndarray:
        """timm's `rand_bbox` (or `rand_bbox_minmax`): (yl, yh, xl, xh) per lam."""
        count = len(lam)
        if self.cutmix_minmax is not None:
            low, high = self.cutmix_minmax
            cut_h = rng.integers(int(height * low), int(height * high), count)
            cut_w = rng.integers(int(width * low), int(width * high), count)
            yl, xl = rng.integers(0, height - cut_h, count), rng.integers(0, width - cut_w, count)
            return np.stack([yl, yl + cut_h, xl, xl + cut_w], axis=1)
        ratio = np.sqrt(1 - lam)
        cut_h, cut_w = (height * ratio).astype(np.int64), (width * ratio).astype(np.int64)
        cy, cx = rng.integers(0, height, count), rng.integers(0, width, count)
        return np.stack([np.clip(cy - cut_h // 2, 0, height), np.clip(cy + cut_h // 2, 0, height),
                         np.clip(cx - cut_w // 2, 0, width), np.clip(cx + cut_w // 2, 0, width)],
                        axis=1)

    def _one_hot(self, labels: torch.Tensor | None, count: int,
                 device: torch.device) -> torch.Tensor:
        """Smoothed one-hot targets (off = smoothing / classes, on = 1 - smoothing + off); float
        (N, classes) labels are taken as targets already."""
        classes = self.num_classes
        assert classes is not None  # checked when made
        if labels is None or len(labels) != count:
            raise DataError(f"Mixup needs one label per image, got "
                            f"{'none' if labels is None else len(labels)} for {count} images")
        if labels.is_floating_point():
            if labels.shape != (count, classes):
                raise DataError(f"Mixup: float labels must be ({count}, {classes}) targets, got "
                                f"{tuple(labels.shape)}")
            return labels.to(device, torch.float32)
        outside = (labels < 0) | (labels >= classes)
        if outside.any():
            raise DataError(f"Mixup: label {int(labels[outside][0])} is outside [0, {classes}) "
                            f"(num_classes={classes})")
        off = self.label_smoothing / classes
        targets = torch.full((count, classes), off, device=device)
        return targets.scatter_(1, labels.to(device, torch.int64).view(-1, 1),
                                1 - self.label_smoothing + off)


def _check(name: str, value: Any, ok: bool, what: str) -> None:
    if not ok:
        raise ArgumentError(f"Mixup {name} must be {what}, got {value!r}")


def _mix_whole_batch(images: torch.Tensor, lam: float, cut: bool, box: np.ndarray) -> None:
    """timm's `_mix_batch`: one lam for all; a cut copies only the partners' boxes."""
    if lam == 1.0:
        return
    if cut:
        yl, yh, xl, xh = (int(v) for v in box)
        images[..., yl:yh, xl:xh] = images[..., yl:yh, xl:xh].flip(0)
    else:
        partner = images.flip(0)
        images.mul_(lam).add_(partner, alpha=1.0 - lam)


def _mix_images(images: torch.Tensor, plan: MixPlan) -> None:
    """Each image i: lam of itself and 1 - lam of image N - 1 - i, blended or in its box."""
    if np.all(plan.lam == 1.0):
        return
    height, width = images.shape[-2:]
    device = images.device
    lam = torch.from_numpy(plan.lam).to(device, images.dtype).view(-1, 1, 1, 1)
    boxes = torch.from_numpy(plan.boxes).to(device)
    ys, xs = torch.arange(height, device=device), torch.arange(width, device=device)
    inside = ((ys >= boxes[:, 0:1]) & (ys < boxes[:, 1:2]))[:, None, :, None] & \
        ((xs >= boxes[:, 2:3]) & (xs < boxes[:, 3:4]))[:, None, None, :]
    cut = torch.from_numpy(plan.cut).to(device).view(-1, 1, 1, 1)
    # the weight of the image itself, per pixel: 0 in a cut box, 1 outside it, lam if blended
    own = torch.where(cut, (~inside).to(images.dtype), lam)
    partner = images.flip(0)
    images.mul_(own).add_(partner.mul_(1 - own))


