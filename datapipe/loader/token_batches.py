"""Builds one token batch: copy each planned segment's ids out of the memory-mapped shards."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from datapipe.format.dataset import Dataset
from datapipe.loader.workers import BatchTask, worker_timing


class TokenBatchBuilder:
    def __init__(self, directory: str) -> None:
        self.dataset = Dataset(directory)
        self.dtype = self.dataset.manifest.column("tokens").numpy_dtype
        self._views: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def _shard_views(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, values) of shard k's token column, for direct slicing."""
        views = self._views.get(k)
        if views is None:
            reader = self.dataset.shard(k)
            get_views = getattr(reader, "payload_views", None)
            views = get_views("tokens")[0] if get_views and len(get_views("tokens")) == 1 \
                else None
            self._views[k] = views
        return views

    def build(self, task: BatchTask, out: np.ndarray) -> dict[str, Any]:
        started = time.perf_counter()
        tokens = out[: len(out) // self.dtype.itemsize * self.dtype.itemsize].view(self.dtype)
        start, end = task.extra["start"], task.extra["end"]
        shards, rows = self.dataset.locate_many(task.indices)
        pos = 0
        for k, row, s, e in zip(shards.tolist(), rows.tolist(), start.tolist(), end.tolist(),
                                strict=True):
            views = self._shard_views(k)
            if views is not None:
                offsets, values = views
                base = int(offsets[row])
                tokens[pos:pos + e - s] = values[base + s:base + e]
            else:
                tokens[pos:pos + e - s] = self.dataset.shard(k).payload("tokens", row)[s:e]
            pos += e - s
        ended = time.perf_counter()
        return {"count": pos, "seg_lengths": end - start, "rows": task.extra["rows"],
                "index": task.indices, "is_padding": task.is_pad,
                "timing": worker_timing(started, ended, {"read": ended - started})}
