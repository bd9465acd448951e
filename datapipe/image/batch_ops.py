"""Per-batch steps, run once per batch on the batch's device: the photometric transforms
(kornia) and `BatchStep`s (`PerBatch`, built-in recipes), in the order written.

On device="cuda" they run on the GPU after the copy (uint8 crosses the bus: a quarter of
float32's bytes). On device="cpu" the workers do what they can per sample (a leading
`Normalize`, sample steps: see `datapipe.image.placement`); what remains here, `ColorJitter` and
batch-only steps such as `PerBatch` and Mixup, runs in the process that iterates the loader:
each is a batch op over float images, and a step that mixes samples needs the whole batch.
Each `BatchStep` is timed as a stage of its own, by name, for the profiler.
"""

from __future__ import annotations

import time
import zlib

import torch

from datapipe.errors import ArgumentError
from datapipe.image.normalize import normalize_, normalize_constants, scale_to_unit
from datapipe.image.placement import step_name
from datapipe.image.steps import BatchStep
from datapipe.image.transforms import ColorJitter, Normalize, Transform

Labels = torch.Tensor | None


class BatchTransforms:
    """N x C x H x W in: uint8 (scaled to [0, 1] first) or floats the workers have already
    normalised; floats out (normalised if `Normalize` is among the steps)."""

    def __init__(self, steps: tuple[Transform, ...], seed: int, view: int = 0) -> None:
        self.steps = steps
        self.seed = seed
        self.view_key = f"/view{view}" if view else ""  # each view draws its own randomness
        self._jitter = {}
        # Normalize's constants, made once per device: building them from Python lists each
        # batch would be a blocking host-to-device copy per batch.
        self._constants: dict[tuple[int, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}
        for step in steps:
            if isinstance(step, ColorJitter):
                self._jitter[id(step)] = _kornia_jitter(step)

    def __bool__(self) -> bool:
        return bool(self.steps)

    @property
    def has_batch_steps(self) -> bool:
        """Whether any step may change the labels, or wants timing by name."""
        return any(isinstance(s, BatchStep) for s in self.steps)

    def __call__(self, images: torch.Tensor, epoch: int, batch_no: int) -> torch.Tensor:
        return self.run(images, None, epoch, batch_no)[0]

    def run(self, images: torch.Tensor, labels: Labels, epoch: int,
            batch_no: int) -> tuple[torch.Tensor, Labels, dict[str, float]]:
        """(images, labels, seconds per BatchStep by name) for batch `batch_no`."""
        x = scale_to_unit(images) if images.dtype == torch.uint8 else images
        stages: dict[str, float] = {}
        for position, step in enumerate(self.steps):
            if isinstance(step, ColorJitter):
                x = self._apply_jitter(step, x, epoch, batch_no)
            elif isinstance(step, Normalize):
                x = normalize_(x, step, *self._normalize_constants(step, x.device))
            else:
                started = time.perf_counter()
                x, labels = self._apply_step(step, position, x, labels, epoch, batch_no)
                name = step_name(step)
                stages[name] = stages.get(name, 0.0) + time.perf_counter() - started
        return x, labels, stages

    def _apply_step(self, step: BatchStep, position: int, x: torch.Tensor, labels: Labels,
                    epoch: int, batch_no: int) -> tuple[torch.Tensor, Labels]:
        generator = torch.Generator(device=x.device)
        generator.manual_seed(self._seed_of(epoch, batch_no, f"/{position}"))
        images, new_labels = step.apply_batch(x, labels, generator)
        n = x.shape[0]
        if not (isinstance(images, torch.Tensor) and images.dim() == 4 and images.shape[0] == n):
            raise ArgumentError(f"{step_name(step)} must return the batch's {n} images as an "
                                f"N x C x H x W tensor, got {_described(images)}")
        if labels is not None and not (isinstance(new_labels, torch.Tensor)
                                       and new_labels.shape[:1] == (n,)):
            raise ArgumentError(f"{step_name(step)} must return the batch's {n} labels as a "
                                f"tensor, got {_described(new_labels)}")
        return images, new_labels

    def _seed_of(self, epoch: int, batch_no: int, step_key: str = "") -> int:
        """From (seed, epoch, batch): the same batch gets the same randomness on any run."""
        return zlib.crc32(f"{self.seed}/{epoch}/{batch_no}{self.view_key}{step_key}".encode())

    def _normalize_constants(self, step: Normalize,
                             device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        key = (id(step), device)
        if key not in self._constants:
            self._constants[key] = normalize_constants(step, device)
        return self._constants[key]

    def _apply_jitter(self, step: ColorJitter, x: torch.Tensor, epoch: int,
                      batch_no: int) -> torch.Tensor:
        devices = [x.device] if x.is_cuda else []
        with torch.random.fork_rng(devices=devices, device_type=x.device.type):
            torch.manual_seed(self._seed_of(epoch, batch_no))
            module = self._jitter[id(step)].to(x.device)
            return module(x)


def _described(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return type(value).__name__


def _kornia_jitter(step: ColorJitter) -> torch.nn.Module:
    try:
        import kornia.augmentation as K
    except ImportError:
        raise ArgumentError("ColorJitter needs kornia: pip install kornia") from None
    return K.ColorJitter(step.brightness, step.contrast, step.saturation, step.hue, p=1.0)
