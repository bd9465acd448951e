"""A planted device for the profiler's device-time source: it runs queued work in order and
says when each mark completes, on the host's clock. No CUDA needed, and real time passes: the
host really waits for data, really blocks when it has queued too much, really syncs."""

from __future__ import annotations

import math
import time


class FakeDevice:
    """Busy until `busy_until` (perf_counter seconds). `launch` queues work and returns at
    once, as kernel launches do, unless more than `max_ahead` seconds are already queued (then
    the host blocks, as it does on a full launch queue); `synchronize` waits for all of it, as
    `loss.item()` does."""

    def __init__(self, max_ahead: float = math.inf) -> None:
        self.busy_until = 0.0
        self.max_ahead = max_ahead
        self.waits = 0  # how often the profiler blocked on a mark

    def launch(self, seconds: float) -> None:
        now = time.perf_counter()
        if self.busy_until - now > self.max_ahead:
            time.sleep(self.busy_until - now - self.max_ahead)
            now = time.perf_counter()
        self.busy_until = max(self.busy_until, now) + seconds

    def synchronize(self) -> None:
        time.sleep(max(0.0, self.busy_until - time.perf_counter()))

    # --- the profiler's DeviceClock ----------------------------------------------------

    def mark(self) -> float:
        """A mark completes once the work queued before it has run."""
        return max(time.perf_counter(), self.busy_until)

    def done(self, mark: float) -> bool:
        return time.perf_counter() >= mark

    def wait(self, mark: float) -> None:
        self.waits += 1
        time.sleep(max(0.0, mark - time.perf_counter()))

    def seconds_between(self, earlier: float, later: float) -> float:
        return later - earlier
