"""What the profiler records of a run: each step, and the run around them. The recorder
fills them in; the analysis reads them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from datapipe.profiling.gpu import DeviceTimes


@dataclass
class StepRecord:
    index: int
    kind: str                 # "normal", "oracle" (replayed batch) or "scaled" (2x batch)
    start: float              # when the loop asked for the batch
    wait: float               # seconds blocked in the loader
    end: float | None = None  # when the step finished (prof.step(), or the next request)
    loader: dict[str, Any] | None = None
    device: DeviceTimes | None = None  # the step on the device, where its marks were read


@dataclass
class Recording:
    """Everything measured, in a form the analysis reads."""

    steps: list[StepRecord] = field(default_factory=list)
    source: str = ""
    num_workers: int | None = None  # the loader's worker processes, where it says
    started: float = 0.0
    stopped: float = 0.0
    loader_started: float | None = None
    notes: list[str] = field(default_factory=list)
    gpu_utilization: list[float] | None = None
    device_clock: str | None = None   # what timed the device (None: host-side waiting only)
    device_origin: float | None = None  # host time of the first device mark
    incomplete: str | None = None     # why the run ended early, when it did
    # What each source of a mixture gave, as the loader's progress() said when a pass ended.
    sources: dict[str, dict[str, int]] | None = None
