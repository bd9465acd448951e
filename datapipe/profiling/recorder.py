"""`dp.profile()`: time every step of a training loop and every stage of the loader feeding it.

The hot path adds two clock reads and one small record per step; everything else (statistics,
verdict, files) happens when the report is asked for.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from datapipe.profiling.gpu import DeviceClock, UtilizationSampler
from datapipe.profiling.probes import double_batch
from datapipe.profiling.settings import ProfileSettings


@dataclass
class StepRecord:
    index: int
    kind: str                 # "normal", "oracle" (replayed batch) or "scaled" (2x batch)
    start: float              # when the loop asked for the batch
    wait: float               # seconds blocked in the loader
    end: float | None = None  # when the step finished (prof.step(), or the next request)
    loader: dict[str, Any] | None = None
    device_seconds: float | None = None


@dataclass
class Recording:
    """Everything measured, in a form the analysis reads."""

    steps: list[StepRecord] = field(default_factory=list)
    source: str = ""
    started: float = 0.0
    stopped: float = 0.0
    loader_started: float | None = None
    notes: list[str] = field(default_factory=list)
    gpu_utilization: list[float] | None = None


class Profiler:
    def __init__(self, settings: ProfileSettings) -> None:
        self.settings = settings
        self.recording = Recording(started=time.perf_counter())
        self._current: StepRecord | None = None
        self._last_loader_record: dict[str, Any] | None = None
        self._device_clock = DeviceClock.create()
        self._utilization = UtilizationSampler.create()
        self._finished = False
        self._probes_done = False
        self._results: dict[str, Any] | None = None

    # --- the loop side -----------------------------------------------------------------

    def wrap(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Yield the iterable's batches, timing how long each one kept the loop waiting."""
        observed = hasattr(iterable, "observer")
        if observed:
            iterable.observer = self
            self.recording.source = type(iterable).__name__
        else:
            self.recording.source = type(iterable).__name__
            self.recording.notes.append(
                "stage times need a datapipe loader; this iterable reports waiting time only")
        source = iterable._iterate() if observed else iter(iterable)
        try:
            yield from self._timed(source)
        finally:
            if observed:
                iterable.observer = None
                producer = getattr(iterable, "_producer", None)
                self.recording.loader_started = getattr(producer, "started_at", None)

    def _timed(self, source: Iterator[Any]) -> Iterator[Any]:
        clock = time.perf_counter
        while True:
            self._end_current(clock())
            if self._probes_due():
                yield from self._run_probes()
            t0 = clock()
            try:
                batch = next(source)
            except StopIteration:
                return
            t1 = clock()
            self._last_batch = batch
            self._begin(StepRecord(len(self.recording.steps), "normal", t0, t1 - t0,
                                   loader=self._last_loader_record))
            self._last_loader_record = None
            yield batch

    def step(self) -> None:
        """Mark the end of a training step (optional: otherwise the next request ends it)."""
        self._end_current(time.perf_counter())

    def on_batch(self, record: dict[str, Any]) -> None:
        """Called by datapipe loaders as each batch is handed out."""
        self._last_loader_record = record

    def _begin(self, record: StepRecord) -> None:
        self._current = record
        self.recording.steps.append(record)
        self._device_clock.mark_start(record.index)

    def _end_current(self, now: float) -> None:
        if self._current is not None and self._current.end is None:
            self._current.end = now
            self._device_clock.mark_end(self._current.index)
        self._current = None

    # --- probes ------------------------------------------------------------------------

    def _probes_due(self) -> bool:
        if self._probes_done or not (self.settings.oracle or self.settings.scaling_test):
            return False
        return len(self.recording.steps) >= self.settings.warmup_steps

    def _run_probes(self) -> Iterator[Any]:
        """Replay the last batch (no loading at all), then the batch doubled."""
        self._probes_done = True
        batch = self._last_batch
        plans = [("oracle", batch)]
        if self.settings.scaling_test:
            doubled = double_batch(batch)
            if doubled is None:
                self.recording.notes.append("scaling test skipped: cannot double this batch")
            else:
                plans.append(("scaled", doubled))
        for kind, probe in plans:
            for _ in range(self.settings.probe_steps):
                now = time.perf_counter()
                self._begin(StepRecord(len(self.recording.steps), kind, now, 0.0))
                yield probe
                self._end_current(time.perf_counter())

    # --- results -----------------------------------------------------------------------

    def finish(self) -> Recording:
        if not self._finished:
            self._end_current(time.perf_counter())
            self.recording.stopped = time.perf_counter()
            self._device_clock.resolve(self.recording.steps)
            self.recording.gpu_utilization = self._utilization.stop()
            self._finished = True
        return self.recording

    def results(self) -> dict[str, Any]:
        """Statistics and verdict; computed once, after the loop has finished."""
        if self._results is None:
            from datapipe.profiling.analysis import analyse

            self._results = analyse(self.finish(), self.settings)
        return self._results

    def report(self) -> str:
        from datapipe.profiling.report import render_text

        return render_text(self.results())

    def save(self) -> None:
        """Write the files asked for (none: nothing is computed)."""
        if not (self.settings.report or self.settings.trace or self.settings.html):
            self.finish()
            return
        from datapipe.profiling.report import save_outputs

        save_outputs(self.finish(), self.results(), self.settings)

    def __enter__(self) -> Profiler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()
        self.save()
