"""Per-batch photometric transforms, run once per batch on the batch's device (kornia)."""

from __future__ import annotations

import zlib

import torch

from datapipe.errors import ArgumentError
from datapipe.image.transforms import ColorJitter, Normalize, Transform

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class BatchTransforms:
    """uint8 N x C x H x W in, floats out (normalised if `Normalize` is among the steps)."""

    def __init__(self, steps: tuple[Transform, ...], seed: int) -> None:
        self.steps = steps
        self.seed = seed
        self._jitter = {}
        # Normalize's constants, made once per device: building them from Python lists each
        # batch would be a blocking host-to-device copy per batch.
        self._constants: dict[tuple[int, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}
        for step in steps:
            if isinstance(step, ColorJitter):
                self._jitter[id(step)] = _kornia_jitter(step)

    def __bool__(self) -> bool:
        return bool(self.steps)

    def __call__(self, images: torch.Tensor, epoch: int, batch_no: int) -> torch.Tensor:
        x = images.float().div_(255.0)
        for step in self.steps:
            if isinstance(step, ColorJitter):
                x = self._apply_jitter(step, x, epoch, batch_no)
            elif isinstance(step, Normalize):
                mean, std = self._normalize_constants(step, x.device)
                x = x.sub_(mean).div_(std).to(_DTYPES[step.dtype])
        return x

    def _normalize_constants(self, step: Normalize,
                             device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        key = (id(step), device)
        if key not in self._constants:
            self._constants[key] = (torch.tensor(step.mean, device=device).view(1, 3, 1, 1),
                                    torch.tensor(step.std, device=device).view(1, 3, 1, 1))
        return self._constants[key]

    def _apply_jitter(self, step: ColorJitter, x: torch.Tensor, epoch: int,
                      batch_no: int) -> torch.Tensor:
        # Seeded from (seed, epoch, batch): the same batch gets the same jitter on any run.
        devices = [x.device] if x.is_cuda else []
        with torch.random.fork_rng(devices=devices, device_type=x.device.type):
            torch.manual_seed(zlib.crc32(f"{self.seed}/{epoch}/{batch_no}".encode()))
            module = self._jitter[id(step)].to(x.device)
            return module(x)


def _kornia_jitter(step: ColorJitter) -> torch.nn.Module:
    try:
        import kornia.augmentation as K
    except ImportError:
        raise ArgumentError("ColorJitter needs kornia: pip install kornia") from None
    return K.ColorJitter(step.brightness, step.contrast, step.saturation, step.hue, p=1.0)
