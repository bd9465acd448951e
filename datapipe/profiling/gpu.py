"""The GPU side of a profile: CUDA-event step times and NVML utilisation, when present.

Kernels run asynchronously, so wall-clock step times on CUDA say when the host queued work,
not when the device did it; events recorded on the stream say the latter.
"""

from __future__ import annotations

import threading
from typing import Any


class DeviceClock:
    """CUDA events at each step's start and end; a no-op without CUDA."""

    def __init__(self, torch_module: Any = None) -> None:
        self.torch = torch_module
        self.events: dict[int, list[Any]] = {}

    @classmethod
    def create(cls) -> DeviceClock:
        try:
            import torch
        except ImportError:
            return cls()
        return cls(torch if torch.cuda.is_available() and torch.cuda.is_initialized() else None)

    def mark_start(self, step: int) -> None:
        if self.torch is not None:
            event = self.torch.cuda.Event(enable_timing=True)
            event.record()
            self.events[step] = [event]

    def mark_end(self, step: int) -> None:
        if self.torch is not None and step in self.events:
            event = self.torch.cuda.Event(enable_timing=True)
            event.record()
            self.events[step].append(event)

    def resolve(self, steps: list[Any]) -> None:
        if self.torch is None:
            return
        self.torch.cuda.synchronize()
        for record in steps:
            pair = self.events.get(record.index)
            if pair and len(pair) == 2:
                record.device_seconds = pair[0].elapsed_time(pair[1]) / 1000.0


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
