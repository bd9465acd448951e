"""Where each step of a pipeline runs: in the workers per sample, or on the batch's device.

The workers run the longest leading run of steps they can: sample steps (`SampleStep`; a step
that also has a batch form only when the batch stays on the CPU) and a `Normalize` (on the CPU,
or anywhere when a sample step after it needs the normalised floats). The rest runs per batch
after the hand-off, in the order written. A sample-only step after a batch step cannot keep its
place, and DALI cannot run Python per sample: both are refused here, when the loader is made.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

from datapipe.errors import ArgumentError
from datapipe.image.normalize import NUMPY_DTYPES
from datapipe.image.steps import PerSample, runs_per_batch, runs_per_sample
from datapipe.image.transforms import Normalize, Pipeline, Transform


@dataclass(frozen=True)
class ViewSpec:
    """One view of each sample, as the workers make it: the crop and flip planned into the
    decode (`decode_size`), then the worker steps in order; `out_size` is what lands in the
    batch. Without sample steps the decoder writes straight into the batch (through a
    `Normalize`'s table when there is one)."""

    pipeline: Pipeline
    decode_size: tuple[int, int]
    worker_steps: tuple[Transform, ...] = ()
    out_size: tuple[int, int] | None = None
    pixel_dtype: str = "uint8"  # what the batch buffer holds: "uint8" or a float dtype

    def __post_init__(self) -> None:
        if self.out_size is None:
            object.__setattr__(self, "out_size", self.decode_size)

    @property
    def normalize(self) -> Normalize | None:
        return next((s for s in self.worker_steps if isinstance(s, Normalize)), None)

    @property
    def sample_steps(self) -> tuple[Transform, ...]:
        return tuple(s for s in self.worker_steps if not isinstance(s, Normalize))

    def nbytes(self, count: int) -> int:
        h, w = self.out_size
        return count * h * w * 3 * NUMPY_DTYPES[self.pixel_dtype].itemsize


def place_steps(pipeline: Pipeline, decode_size: tuple[int, int], device_type: str,
                decode: str) -> tuple[ViewSpec, tuple[Transform, ...]]:
    """(what the workers do, the steps left to run per batch) for one view."""
    steps = pipeline.pixel_steps
    count = _worker_prefix(steps, device_type, decode)
    worker, rest = steps[:count], steps[count:]
    misplaced = next((s for s in rest if not runs_per_batch(s) and runs_per_sample(s)), None)
    if misplaced is not None:
        raise ArgumentError(_misplaced(misplaced, rest, decode))
    out_size, dtype = _walk_outputs(worker, decode_size)
    return ViewSpec(pipeline, decode_size, worker, out_size, dtype), rest


def _worker_prefix(steps: tuple[Transform, ...], device_type: str, decode: str) -> int:
    if decode != "cpu":
        return 0
    count, last_sample = 0, 0
    for step in steps:
        if isinstance(step, Normalize):
            pass
        elif runs_per_sample(step) and (device_type == "cpu" or not runs_per_batch(step)):
            last_sample = count + 1
        else:
            break
        count += 1
    # Off the CPU a Normalize stays a batch op (uint8 crosses the bus) unless a sample step
    # after it needs its floats.
    return count if device_type == "cpu" else last_sample


def _misplaced(step: Transform, rest: tuple[Transform, ...], decode: str) -> str:
    name = step_name(step)
    if decode != "cpu":
        return (f"{name} runs per sample in Python and cannot run inside DALI's pipeline: use "
                f"decode='cpu', or a batch form of it (datapipe.PerBatch)")
    first = step_name(rest[0])
    return (f"{name} runs per sample in the workers, before the batch steps: it cannot come "
            f"after {first}, which runs on the whole batch; put it before {first}")


def step_name(step: Transform) -> str:
    return getattr(step, "stage_name", None) or type(step).__name__


def _walk_outputs(worker: tuple[Transform, ...],
                  size: tuple[int, int]) -> tuple[tuple[int, int], str]:
    """The view's output size and batch dtype after the worker steps, each checked against
    what it is given (a uint8-only step after floats, a Normalize after a float step)."""
    dtype = "uint8"
    for step in worker:
        if isinstance(step, Normalize):
            if dtype != "uint8":
                raise ArgumentError("Normalize needs uint8 pixels, but a step before it "
                                    "returns float32")
            dtype = "float32"
            continue
        if getattr(step, "needs_uint8", False) and dtype != "uint8":
            raise ArgumentError(f"{step_name(step)} works on uint8 pixels: put it before "
                                "Normalize")
        if isinstance(step, PerSample):
            size, dtype = step.shape or size, step.dtype or dtype
    normalize = next((s for s in worker if isinstance(s, Normalize)), None)
    return size, normalize.dtype if normalize is not None else dtype


def check_picklable(worker: tuple[Transform, ...]) -> None:
    """Worker steps go to other processes: refuse one that cannot, now, by name."""
    for step in worker:
        try:
            pickle.dumps(step)
        except Exception as exc:
            raise ArgumentError(f"{step_name(step)} cannot be sent to worker processes "
                                f"({type(exc).__name__}: {exc}); define the function at "
                                "module level (not a lambda or a local function), or pass "
                                "num_workers=0") from None

