"""`dp.profile()`: time every step of a training loop and every stage of the loader feeding it.

The hot path adds two clock reads and one small record per step (and, where CUDA is in use,
three CUDA events); everything else (statistics, verdict, files) happens when the report is
asked for.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

from datapipe.profiling.gpu import (
    DeviceClock,
    DeviceTimeline,
    UtilizationSampler,
    cuda_clock,
)
from datapipe.profiling.probes import double_batch
from datapipe.profiling.recording import Recording, StepRecord
from datapipe.profiling.settings import ProfileSettings

DETECT_REQUESTS = 3  # CUDA use is looked for at the first requests (a model may move late)


class Profiler:
    def __init__(self, settings: ProfileSettings, device_clock: DeviceClock | None = None) -> None:
        self.settings = settings
        self.recording = Recording(started=time.perf_counter())
        self._current: StepRecord | None = None
        self._last_loader_record: dict[str, Any] | None = None
        self._device: DeviceTimeline | None = None
        self._detect = device_clock is None  # look for CUDA; a planted clock is used as is
        if device_clock is not None:
            self._use_device(device_clock, type(device_clock).__name__)
        self._utilization = UtilizationSampler.create()
        self._finished = False
        # Probes still to run: the batch they replay is kept until then, and no longer (it
        # may hold a shared-memory slot or a GPU tensor).
        self._probes_done = not (settings.oracle or settings.scaling_test)
        self._last_batch: Any = None
        self._results: dict[str, Any] | None = None

    # --- the loop side -----------------------------------------------------------------

    def wrap(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Yield the iterable's batches, timing how long each one kept the loop waiting."""
        observed = hasattr(iterable, "observer") and hasattr(iterable, "_iterate")
        self._name_source(type(iterable).__name__)
        if observed:
            iterable.observer = self
        else:
            self._note("stage times need a datapipe loader; this iterable reports waiting "
                       "time only")
        source = iterable._iterate() if observed else iter(iterable)
        try:
            yield from self._timed(source)
        finally:
            if observed:
                iterable.observer = None
                self._take_progress(iterable)
                producer = getattr(iterable, "_producer", None)
                started = getattr(producer, "started_at", None)
                workers = getattr(producer, "num_workers", None)
                if isinstance(workers, int):
                    self.recording.num_workers = workers
                self.recording.loader_started = self.recording.loader_started or started

    def _take_progress(self, loader: Any) -> None:
        """A mixture's samples (tokens) per source so far, for the report; read once per pass,
        after it, off the hot path."""
        if getattr(loader, "mixing", None) is not None:
            try:
                self.recording.sources = loader.progress()
            except Exception as exc:  # the report goes on without it, and says why
                self._note(f"per-source counts unavailable: {type(exc).__name__}: {exc}")

    def _timed(self, source: Iterator[Any]) -> Iterator[Any]:
        clock = time.perf_counter
        while True:
            self._end_current(clock())
            if self._probes_due():
                yield from self._run_probes()
            if self._detect:
                self._detect_device()
            t0 = clock()
            record = StepRecord(len(self.recording.steps), "normal", t0, 0.0)
            device = self._device
            if device is not None:
                device.request(record, t0)
            try:
                batch = next(source)
            except StopIteration:
                if device is not None:
                    device.cancel()
                return
            record.wait = clock() - t0
            if device is not None:
                device.handover()
            record.loader, self._last_loader_record = self._last_loader_record, None
            if not self._probes_done:
                self._last_batch = batch
            self._append(record)
            yield batch

    def step(self) -> None:
        """Mark the end of a training step (optional: otherwise the next request ends it)."""
        self._end_current(time.perf_counter())

    def on_batch(self, record: dict[str, Any]) -> None:
        """Called by datapipe loaders as each batch is handed out."""
        self._last_loader_record = record

    def _append(self, record: StepRecord) -> None:
        record.index = len(self.recording.steps)  # the analysis relies on index = position
        self._current = record
        self.recording.steps.append(record)

    def _end_current(self, now: float) -> None:
        if self._current is not None and self._current.end is None:
            self._current.end = now
            if self._device is not None:
                self._device.end()
        self._current = None

    def _detect_device(self) -> None:
        clock = cuda_clock()
        if clock is not None:
            self._use_device(clock, "CUDA events")
        elif len(self.recording.steps) + 1 < DETECT_REQUESTS:
            return
        self._detect = False

    def _use_device(self, clock: DeviceClock, name: str) -> None:
        self._device = DeviceTimeline(clock)
        self.recording.device_clock = name

    def _name_source(self, name: str) -> None:
        names = self.recording.source.split(", ") if self.recording.source else []
        if name not in names:
            self.recording.source = ", ".join([*names, name])

    def _note(self, text: str) -> None:
        if text not in self.recording.notes:
            self.recording.notes.append(text)

    # --- probes ------------------------------------------------------------------------

    def _probes_due(self) -> bool:
        if self._probes_done:
            return False
        return len(self.recording.steps) >= self.settings.warmup_steps

    def _run_probes(self) -> Iterator[Any]:
        """Replay the last batch (no loading at all), then the batch doubled."""
        self._probes_done = True
        batch, self._last_batch = self._last_batch, None
        plans = [("oracle", batch)]
        if self.settings.scaling_test:
            doubled = double_batch(batch)
            if doubled is None:
                self._note("scaling test skipped: cannot double this batch")
            else:
                plans.append(("scaled", doubled))
        for kind, probe in plans:
            for _ in range(self.settings.probe_steps):
                now = time.perf_counter()
                record = StepRecord(len(self.recording.steps), kind, now, 0.0)
                if self._device is not None:
                    self._device.request(record, now)
                    self._device.handover()
                self._append(record)
                yield probe
                self._end_current(time.perf_counter())

    # --- results -----------------------------------------------------------------------

    def finish(self) -> Recording:
        if not self._finished:
            self._end_current(time.perf_counter())
            self.recording.stopped = time.perf_counter()
            if self._device is not None:
                self._finish_device(self._device)
            self.recording.gpu_utilization = self._utilization.stop()
            self._finished = True
        return self.recording

    def _finish_device(self, device: DeviceTimeline) -> None:
        device.finish()
        if device.failure is None:
            self.recording.device_origin = device.origin_host
            return
        self._note(f"device timings dropped ({device.failure}); host-side waiting is shown")
        self.recording.device_clock = None
        for record in self.recording.steps:
            record.device = None

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

        save_outputs(self.results(), self.settings)

    def __enter__(self) -> Profiler:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None and self._results is None:
            # The figures up to here are real; a verdict on them would not be.
            self.recording.incomplete = f"the profiled code raised {exc_type.__name__}"
        self.finish()
        self.save()
