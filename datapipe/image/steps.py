"""Augmentation steps beyond the planned geometry: the protocol, and the user's own functions.

A `SampleStep` runs in the worker processes on one sample's HWC pixels (uint8 before a
`Normalize`, float32 after it), with a NumPy generator that is a pure function of (seed, epoch,
sample index). A `BatchStep` runs on the whole N x C x H x W batch where it lives after the
hand-off, with a torch generator seeded from (seed, epoch, batch position). A step that
implements both is run per sample in the CPU workers when the batch stays on the CPU, and per
batch on the device when it goes to CUDA (see `datapipe.image.placement`).

`PerSample` and `PerBatch` wrap any callable in these protocols: torchvision v2 transforms and
kornia modules work as they are. datapipe never imports torchvision: a v2 transform is known by
its class's module and called on a CHW uint8 tensor.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np
import torch

from datapipe.errors import ArgumentError
from datapipe.image.transforms import Transform
from datapipe.system import in_worker


class SampleStep(Transform):
    """Runs per sample in the workers: `apply_sample(pixels, rng)` -> pixels of the same shape
    and dtype (HWC; uint8 before a `Normalize`, float32 after it)."""

    kind: ClassVar[str] = "sample"
    # True for steps that only make sense on uint8 pixels: refused after a Normalize.
    needs_uint8: ClassVar[bool] = False

    def apply_sample(self, pixels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    @property
    def stage_name(self) -> str:
        return type(self).__name__


class BatchStep(Transform):
    """Runs per batch where the batch lives: `apply_batch(images, labels, generator)` on
    N x C x H x W floats in [0, 1] (normalised after a `Normalize`); labels int64 (N,) or float
    (N, classes), returned changed or as they came."""

    kind: ClassVar[str] = "batch"

    def apply_batch(self, images: torch.Tensor, labels: torch.Tensor | None,
                    generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        raise NotImplementedError

    @property
    def stage_name(self) -> str:
        return type(self).__name__


def runs_per_sample(step: Transform) -> bool:
    return isinstance(step, SampleStep)


def runs_per_batch(step: Transform) -> bool:
    return isinstance(step, BatchStep)


def _callable_name(fn: Any) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def _positional_count(fn: Callable[..., Any]) -> int:
    """How many positional arguments `fn` requires (a module's: its forward's)."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: called with images alone
        return 1
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
               for p in parameters)


def _takes_rng(fn: Callable[..., Any]) -> bool:
    try:
        parameter = inspect.signature(fn).parameters.get("rng")
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.kind in (parameter.KEYWORD_ONLY,
                                                        parameter.POSITIONAL_OR_KEYWORD)


def takes_tensors(fn: Any) -> bool:
    """A torchvision v2 transform (by its class's module) or any torch module: called on a CHW
    tensor rather than HWC NumPy pixels."""
    return type(fn).__module__.startswith("torchvision.transforms.v2") or \
        isinstance(fn, torch.nn.Module)


def seed_globals(seed: int) -> None:
    """torch's (CPU) and NumPy's global generators from `seed`."""
    torch.default_generator.manual_seed(seed)  # torch.manual_seed seeds every device: 0.2 ms
    np.random.seed(seed % 2**32)


@contextlib.contextmanager
def seeded_globals(seed: int) -> Iterator[None]:
    """torch's and NumPy's global generators seeded for one call (torchvision v2 and most user
    code draw from them), then put back: in the process that iterates the loader
    (num_workers=0) the caller's randomness stays as it was. A worker's generators are its own
    and are seeded without this (saving NumPy's state costs about 0.15 ms a sample)."""
    generator = torch.default_generator
    numpy_state, torch_state = np.random.get_state(), generator.get_state()
    seed_globals(seed)
    try:
        yield
    finally:
        np.random.set_state(numpy_state)
        generator.set_state(torch_state)


def _shape(value: Any) -> tuple[int, int] | None:
    """PerSample's `shape`: (height, width) or (height, width, 3) of its output."""
    if value is None:
        return None
    items = tuple(value) if isinstance(value, tuple | list) else ()
    if len(items) == 3 and items[2] == 3:
        items = items[:2]
    if len(items) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                                  for v in items):
        raise ArgumentError(f"PerSample shape must be (height, width) or (height, width, 3) "
                            f"of the function's output, got {value!r}")
    return items


@dataclass(frozen=True)
class PerSample(SampleStep):
    """The user's function per sample, in the workers: `fn(pixels)` or, when it takes a keyword
    `rng`, `fn(pixels, rng=generator)`, on HWC NumPy pixels; a torchvision v2 transform or a
    torch module gets and returns a CHW tensor. It returns pixels of its input's shape and dtype
    unless `shape` ((H, W)) or `dtype` ("uint8", "float32") say otherwise."""

    fn: Callable[..., Any]
    name: str | None = None
    shape: tuple[int, int] | None = None
    dtype: str | None = None

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ArgumentError(f"PerSample takes a callable, got {type(self.fn).__name__}")
        object.__setattr__(self, "shape", _shape(self.shape))
        if self.dtype is not None:
            try:
                dtype = str(np.dtype(self.dtype))
            except TypeError:  # not a dtype at all ("pixels", 3.5 ...)
                dtype = None
            if dtype not in ("uint8", "float32"):
                raise ArgumentError(f"PerSample dtype must be 'uint8' or 'float32', got "
                                    f"{self.dtype!r}")
            object.__setattr__(self, "dtype", dtype)

    @property
    def stage_name(self) -> str:
        return f"PerSample({self.name or _callable_name(self.fn)})"

    @cached_property
    def _tensors(self) -> bool:
        return takes_tensors(self.fn)

    @cached_property
    def _with_rng(self) -> bool:
        return not self._tensors and _takes_rng(self.fn)

    def apply_sample(self, pixels: np.ndarray, rng: np.random.Generator) -> Any:
        return self.apply_seeded(pixels, int(rng.integers(2**63)), lambda: rng)

    def apply_seeded(self, pixels: np.ndarray, seed: int,
                     rng: Callable[[], np.random.Generator]) -> Any:
        """The call with the global generators seeded from `seed`, and `rng()` made only for
        a function that takes one: the workers' way, which spends no generator on the
        functions that draw from the globals or not at all."""
        if in_worker():  # a worker's generators are its own: seeded, with nothing to restore
            seed_globals(seed)
            return self._call(pixels, rng)
        with seeded_globals(seed):
            return self._call(pixels, rng)

    def _call(self, pixels: np.ndarray, rng: Callable[[], np.random.Generator]) -> Any:
        if self._tensors:
            result = self.fn(torch.from_numpy(pixels).permute(2, 0, 1))
            # Anything but a CHW tensor goes back as it is, for the loader to name.
            return result.permute(1, 2, 0).numpy() \
                if isinstance(result, torch.Tensor) and result.dim() == 3 else result
        return self.fn(pixels, rng=rng()) if self._with_rng else self.fn(pixels)


@dataclass(frozen=True)
class PerBatch(BatchStep):
    """The user's function over the whole batch, where it lives: `fn(images)` -> images, or
    `fn(images, labels)` -> (images, labels) when it takes two positional arguments. kornia
    augmentation modules and `AugmentationSequential` work as they are (they draw from torch's
    global generator, which is seeded per batch)."""

    fn: Callable[..., Any]
    name: str | None = None

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ArgumentError(f"PerBatch takes a callable or torch module, got "
                                f"{type(self.fn).__name__}")

    @property
    def stage_name(self) -> str:
        return f"PerBatch({self.name or _callable_name(self.fn)})"

    @cached_property
    def _with_labels(self) -> bool:
        return _positional_count(self.fn) >= 2

    def apply_batch(self, images: torch.Tensor, labels: torch.Tensor | None,
                    generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        if isinstance(self.fn, torch.nn.Module):
            self.fn.to(images.device)  # a no-op once there
        devices = [images.device] if images.is_cuda else []
        with torch.random.fork_rng(devices=devices, device_type=images.device.type):
            torch.manual_seed(generator.initial_seed())
            if not self._with_labels:
                return self.fn(images), labels
            result = self.fn(images, labels)
        if not (isinstance(result, tuple | list) and len(result) == 2):
            raise ArgumentError(f"{self.stage_name} takes (images, labels) and must return "
                                f"that pair, got {type(result).__name__}")
        return result[0], result[1]
