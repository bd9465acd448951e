"""A loader that reports planted per-batch records through the real observer hooks
(`LoaderBase._record` / `_report`), for regimes a 2-core test machine cannot produce for real
(16 workers) and for records as odd as a loader may send."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from datapipe.loader.base import LoaderBase


def busy(seconds: float) -> None:
    """Real work on this thread, not sleep."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class PlantedLoader(LoaderBase):
    """`batches` batches. Before handing batch b out it blocks `blocked_s` (as on an empty
    queue: waiting for the workers) and then really spends `main_s` on `main_stage` in this
    process; `meta(b, now)` plants what the workers reported (timing, queue depth)."""

    def __init__(self, batches: int, meta: Callable[[int, float], dict[str, Any]], *,
                 main_stage: str = "collate", main_s: float = 0.0, blocked_s: float = 0.0,
                 after: dict[str, float] | None = None) -> None:
        super().__init__()
        self.batches, self.meta = batches, meta
        self.main_stage, self.main_s, self.blocked_s = main_stage, main_s, blocked_s
        self.after = after or {}

    def __len__(self) -> int:
        return self.batches

    def _iterate(self) -> Iterator[dict[str, Any]]:
        for b in range(self.batches):
            time.sleep(self.blocked_s)
            t0 = time.perf_counter()
            busy(self.main_s)
            self._record(b, self.meta(b, t0), {self.main_stage: time.perf_counter() - t0})
            self._report(b, **self.after)
            yield {"x": torch.full((4,), float(b))}


def worker_meta(workers: int, per_batch_s: dict[str, float], ready: int,
                capacity: int) -> Callable[[int, float], dict[str, Any]]:
    """Records as `workers` parallel workers send them: batch b built by worker b % workers
    over the sum(per_batch_s) seconds before its hand-off, so that many batches overlap."""
    span = sum(per_batch_s.values())

    def meta(b: int, now: float) -> dict[str, Any]:
        return {"timing": {"pid": 10_000 + b % workers, "start": now - span, "end": now,
                           "stages": dict(per_batch_s)},
                "queue": {"ready": ready, "capacity": capacity}}

    return meta
