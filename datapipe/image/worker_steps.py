"""One view of one sample into its place in the batch, in a worker: the steps after decode.

Without sample steps the decoder writes into the batch buffer directly (through a `Normalize`'s
table when the workers normalise): nothing is added to that path. With them, it decodes into a
uint8 scratch image, runs the uint8 steps, normalises into float32 if a `Normalize` comes next,
runs the float steps, and stores the result in the batch's dtype. Each step's output is checked
on every sample (a few comparisons): a wrong one is refused by name before it reaches a batch.
"""

from __future__ import annotations

import functools
import time

import numpy as np
import torch

from datapipe.errors import ArgumentError
from datapipe.image.normalize import normalize_table
from datapipe.image.pixel_map import apply_table
from datapipe.image.placement import ViewSpec, step_name
from datapipe.image.sample_random import SampleGenerators
from datapipe.image.steps import PerSample
from datapipe.image.transforms import Normalize, Transform


class StepFailed(Exception):
    """A sample step raised: the builder names the sample and applies `on_error`."""

    def __init__(self, step: Transform, error: BaseException) -> None:
        super().__init__(f"{step_name(step)} failed: {type(error).__name__}: {error}")


class ViewDecoder:
    def __init__(self, view: ViewSpec, view_no: int, seed: int) -> None:
        self.view, self.view_no, self.seed = view, view_no, seed
        self.generators = SampleGenerators(seed)
        self.steps = view.worker_steps if view.sample_steps else ()
        normalize = view.normalize
        # The direct path writes the batch's dtype through the table; the stepped path
        # normalises to float32 for the float steps and casts once at the end.
        self.table = normalize_table(normalize) if normalize and not self.steps else None
        if self.steps:
            self.scratch = np.empty((*view.decode_size, 3), dtype=np.uint8)
            if normalize is not None:
                self.float_table = normalize_table(Normalize(normalize.mean, normalize.std))
        # A Normalize that ends the worker steps maps straight into the batch row, in its
        # dtype: the table is the batch op's arithmetic, so the values are the same.
        self.final_table = normalize_table(normalize) \
            if self.steps and isinstance(self.steps[-1], Normalize) else None
        self.step_seconds = {step_name(s): 0.0 for s in self.steps
                             if not isinstance(s, Normalize)}
        self.names = [step_name(s) for s in self.steps]  # made once: a sample costs ~400 us

    def decode_target(self, out: np.ndarray) -> np.ndarray:
        """Where the decoder writes (through `self.table`): the batch row itself, or the
        scratch image the steps start from."""
        return self.scratch if self.steps else out

    def finish(self, out: np.ndarray, epoch: int, index: int) -> None:
        """Run the steps on the decoded scratch image into the batch row (none: nothing)."""
        if self.final_table is not None:
            pixels = self.run_steps(self.scratch, epoch, index, len(self.steps) - 1)
            apply_table(np.ascontiguousarray(pixels), self.final_table, out)
        elif self.steps:
            _store(self.run_steps(self.scratch, epoch, index), out)

    def run_steps(self, pixels: np.ndarray, epoch: int, index: int,
                  count: int | None = None) -> np.ndarray:
        """The first `count` steps (all by default) on `pixels`."""
        for position, step in enumerate(self.steps[:count]):
            if isinstance(step, Normalize):
                normalized = np.empty(pixels.shape, np.float32)
                apply_table(np.ascontiguousarray(pixels), self.float_table, normalized)
                pixels = normalized
                continue
            started = time.perf_counter()
            expected = _expected(step, pixels)
            try:
                result = self._apply(step, pixels, epoch, index, position)
            except Exception as exc:  # the user's code: any failure names the sample
                raise StepFailed(step, exc) from exc
            pixels = _checked(step, result, expected)
            self.step_seconds[self.names[position]] += time.perf_counter() - started
        return pixels

    def _apply(self, step: Transform, pixels: np.ndarray, epoch: int, index: int,
               position: int) -> object:
        """One step on one sample, with its randomness: a user's function gets its global
        generators seeded by a hash, and a generator only if it takes one."""
        where = (epoch, index, self.view_no, position)
        if isinstance(step, PerSample):
            return step.apply_seeded(pixels, self.generators.seed_for(*where),
                                     functools.partial(self.generators.for_sample, *where))
        return step.apply_sample(pixels, self.generators.for_sample(*where))

    def take_step_seconds(self) -> dict[str, float]:
        seconds = dict(self.step_seconds)
        for name in self.step_seconds:
            self.step_seconds[name] = 0.0
        return seconds


def _expected(step: Transform, pixels: np.ndarray) -> tuple[tuple[int, ...], np.dtype]:
    if not isinstance(step, PerSample):  # the protocol: the input's shape and dtype
        return pixels.shape, pixels.dtype
    return ((*step.shape, 3) if step.shape else pixels.shape,
            np.dtype(step.dtype) if step.dtype else pixels.dtype)


def _checked(step: Transform, result: object,
             expected: tuple[tuple[int, ...], np.dtype]) -> np.ndarray:
    shape, dtype = expected
    if isinstance(result, np.ndarray) and result.shape == shape and result.dtype == dtype:
        return result
    want = f"{'x'.join(map(str, shape))} {dtype}"  # made only for the message: 10 us a sample
    if not isinstance(result, np.ndarray):
        raise ArgumentError(f"{step_name(step)} returned {type(result).__name__}, not an array "
                            f"of {want} pixels")
    hint = " (declare it with shape= / dtype=)" if isinstance(step, PerSample) else ""
    raise ArgumentError(f"{step_name(step)} returned {'x'.join(map(str, result.shape))} "
                        f"{result.dtype} pixels; this loader expects {want} there{hint}")


def _store(pixels: np.ndarray, out: np.ndarray) -> None:
    """float32 or uint8 pixels into the batch's dtype (bfloat16 as its bits, rounded as torch
    rounds, so the values equal the batch op's)."""
    if out.dtype == np.uint16 and pixels.dtype == np.float32:
        bits = torch.from_numpy(np.ascontiguousarray(pixels)).to(torch.bfloat16)
        out[:] = bits.view(torch.int16).numpy().view(np.uint16)
    else:
        out[:] = pixels
