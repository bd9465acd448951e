"""Per-batch photometric transforms, run once per batch on the batch's device (kornia).

On device="cuda" they run on the GPU after the copy (uint8 crosses the bus: a quarter of
float32's bytes). On device="cpu" a leading `Normalize` is done by the workers while they
decode (see `datapipe.image.normalize`); what remains here, `ColorJitter` above all, runs in the
process that iterates the loader: it is a batch op over float images, as kornia does it.
"""

from __future__ import annotations

import zlib

import torch

from datapipe.errors import ArgumentError
from datapipe.image.normalize import normalize_, normalize_constants, scale_to_unit
from datapipe.image.transforms import ColorJitter, Normalize, Transform


class BatchTransforms:
    """N x C x H x W in: uint8 (scaled to [0, 1] first) or floats the workers have already
    normalised; floats out (normalised if `Normalize` is among the steps)."""

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
        x = scale_to_unit(images) if images.dtype == torch.uint8 else images
        for step in self.steps:
            if isinstance(step, ColorJitter):
                x = self._apply_jitter(step, x, epoch, batch_no)
            elif isinstance(step, Normalize):
                x = normalize_(x, step, *self._normalize_constants(step, x.device))
        return x

    def _normalize_constants(self, step: Normalize,
                             device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        key = (id(step), device)
        if key not in self._constants:
            self._constants[key] = normalize_constants(step, device)
        return self._constants[key]

    def _apply_jitter(self, step: ColorJitter, x: torch.Tensor, epoch: int,
                      batch_no: int) -> torch.Tensor:
        # Seeded from (seed, epoch, batch): the same batch gets the same jitter on any run.
        devices = [x.device] if x.is_cuda else []
        with torch.random.fork_rng(devices=devices, device_type=x.device.type):
            torch.manual_seed(zlib.crc32(f"{self.seed}/{epoch}/{batch_no}".encode()))
            module = self._jitter[id(step)].to(x.device)
            return module(x)


def split_for_workers(steps: tuple[Transform, ...],
                      device: torch.device) -> tuple[Normalize | None, tuple[Transform, ...]]:
    """(the Normalize the CPU workers do while decoding, or None; the steps left as batch ops).

    Only a leading Normalize moves, and only on the CPU: a jitter before it needs the batch
    in [0, 1] first, and on CUDA uint8 crosses the bus and the device normalises."""
    if device.type == "cpu" and steps and isinstance(steps[0], Normalize):
        return steps[0], steps[1:]
    return None, steps


def _kornia_jitter(step: ColorJitter) -> torch.nn.Module:
    try:
        import kornia.augmentation as K
    except ImportError:
        raise ArgumentError("ColorJitter needs kornia: pip install kornia") from None
    return K.ColorJitter(step.brightness, step.contrast, step.saturation, step.hue, p=1.0)
