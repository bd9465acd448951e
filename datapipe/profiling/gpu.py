"""The GPU side of a profile: when the device idled for want of data, and NVML utilisation.

Kernels run asynchronously, so host-side waiting says when the host was blocked, not whether
the device was: a host that waits for a batch while the device still runs queued work is not
starving it. Marks recorded in stream order (CUDA events) say what the device did. Each step
gets three: when its batch is requested, when the batch is handed over (before the step's
first kernel) and when its work has been queued (`prof.step()`). A mark completes once the
device has run everything queued before it, so request -> hand-over is device time spent on
nothing but the input: idle while the host fetched the batch, waiting for its copy, or running
the loader's own device transforms. While the device is still busy with earlier steps both
marks complete back to back and the gap is zero.

Marks are read lazily, a few steps after they were recorded (never waiting for the device on
the training thread), and the rest at the end of the run.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol


class DeviceClock(Protocol):
    """Where device time comes from: marks recorded in stream order, read once complete.

    The CUDA implementation records events; a test can plant one that models a device busy
    until some time.
    """

    def mark(self) -> Any:
        """Record a mark after all the work queued so far."""

    def done(self, mark: Any) -> bool:
        """Whether the device has reached the mark (never blocks)."""

    def wait(self, mark: Any) -> None:
        """Block until the device has reached the mark (end of the run only)."""

    def seconds_between(self, earlier: Any, later: Any) -> float:
        """Device seconds from one completed mark to a later one."""


class CudaEventClock:
    """CUDA events on the current stream, created with timing enabled and reused once read."""

    def __init__(self, torch_module: Any) -> None:
        self.torch = torch_module
        self._free: list[Any] = []

    def mark(self) -> Any:
        event = self._free.pop() if self._free else self.torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def done(self, mark: Any) -> bool:
        return bool(mark.query())

    def wait(self, mark: Any) -> None:
        mark.synchronize()

    def seconds_between(self, earlier: Any, later: Any) -> float:
        return earlier.elapsed_time(later) / 1000.0

    def recycle(self, marks: list[Any]) -> None:
        self._free.extend(marks)


def cuda_clock() -> CudaEventClock | None:
    """CUDA events when this process has started using CUDA; None otherwise (the host-side
    measure applies, and CUDA is never initialised by the profiler itself)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return CudaEventClock(torch)


@dataclass
class DeviceTimes:
    """One step's marks as device seconds since the run's first mark."""

    request: float
    handover: float
    end: float

    @property
    def wait(self) -> float:
        """Device time between the request and the hand-over: spent on the input alone."""
        return max(0.0, self.handover - self.request)

    @property
    def seconds(self) -> float:
        """The whole step on the device, from the request to its last queued work."""
        return max(0.0, self.end - self.request)


class DeviceTimeline:
    """Marks per step, resolved into `DeviceTimes` once the device has passed them.

    A failing clock (a CUDA error, events on another device) turns device timing off with a
    note instead of breaking the training loop: `failure` says why.
    """

    LAG = 4  # steps left unread: by then their work has normally run, so query() is cheap

    def __init__(self, clock: DeviceClock) -> None:
        self.clock = clock
        self.origin: Any = None  # the first mark; every time is measured from it
        self.origin_host: float | None = None  # host clock when it was recorded
        self.failure: str | None = None
        self._open: deque[tuple[Any, list[Any]]] = deque()
        self._current: list[Any] | None = None

    def request(self, record: Any, host_now: float) -> None:
        """The loop asks for a batch; `record` (a StepRecord) will receive the times."""
        if self.failure is not None:
            return
        self.cancel()  # a request that never got its batch (the loader raised) is not a step
        try:
            mark = self.clock.mark()
            if self.origin is None:
                self.origin, self.origin_host = mark, host_now
            self._current = [mark]
            self._open.append((record, self._current))
            self._read_old()
        except Exception as exc:
            self._fail(exc)

    def handover(self) -> None:
        if self._current is not None and len(self._current) == 1:
            try:
                self._current.append(self.clock.mark())
            except Exception as exc:
                self._fail(exc)

    def end(self) -> None:
        if self._current is not None and len(self._current) == 2:
            try:
                self._current.append(self.clock.mark())
            except Exception as exc:
                self._fail(exc)
        self._current = None

    def cancel(self) -> None:
        """The request yielded nothing (the iterable ended): no step to time."""
        if self._current is not None and self._open and self._open[-1][1] is self._current:
            self._open.pop()
        self._current = None

    def finish(self) -> None:
        """Read every finished step's marks, waiting for the device once, at the end."""
        self.end()
        complete = [(r, m) for r, m in self._open if len(m) == 3]
        self._open.clear()
        try:
            if complete:
                self.clock.wait(complete[-1][1][-1])
            for record, marks in complete:
                self._resolve(record, marks)
        except Exception as exc:
            self._fail(exc)

    def _read_old(self) -> None:
        while len(self._open) > self.LAG and self._complete(self._open[0][1]):
            self._resolve(*self._open.popleft())

    def _complete(self, marks: list[Any]) -> bool:
        return len(marks) == 3 and self.clock.done(marks[-1])

    def _resolve(self, record: Any, marks: list[Any]) -> None:
        since = self.clock.seconds_between
        request, handover, end = (since(self.origin, m) for m in marks)
        record.device = DeviceTimes(request, handover, end)
        recycle = getattr(self.clock, "recycle", None)
        if recycle is not None:
            recycle([m for m in marks if m is not self.origin])

    def _fail(self, exc: Exception) -> None:
        self.failure = f"{type(exc).__name__}: {exc}".splitlines()[0]
        self._open.clear()
        self._current = None


class UtilizationSampler:
    """GPU utilisation every 100 ms through NVML (nvidia-ml-py), in a daemon thread."""

    def __init__(self, handle: Any = None, nvml: Any = None) -> None:
        self.samples: list[float] = []
        self._handle, self._nvml = handle, nvml
        self._stop = threading.Event()
        if handle is not None:
            threading.Thread(target=self._run, daemon=True, name="datapipe-nvml").start()

    _nvml_missing = False  # NVML failed once in this process: do not dlopen it again

    @classmethod
    def create(cls) -> UtilizationSampler:
        if cls._nvml_missing:
            return cls()
        try:
            import pynvml

            pynvml.nvmlInit()
            return cls(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml)
        except Exception:
            cls._nvml_missing = True
            return cls()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            rates = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
            self.samples.append(float(rates.gpu))

    def stop(self) -> list[float] | None:
        self._stop.set()
        return self.samples if self._handle is not None else None
