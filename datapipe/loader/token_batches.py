"""Builds one token batch: copy each planned segment's ids out of the memory-mapped shards."""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.format.dataset import Dataset
from datapipe.format.manifest import Manifest
from datapipe.format.sources import Location
from datapipe.loader.extra_columns import ExtraColumns
from datapipe.loader.workers import BatchTask, worker_timing


@dataclass(frozen=True)
class TokenViews:
    """A shard's token column as (offsets, values) per record batch, for direct slicing."""

    starts: list[int]  # each batch's first row
    views: list[tuple[np.ndarray, np.ndarray]]

    def find(self, row: int) -> tuple[np.ndarray, np.ndarray, int]:
        """The views of the batch holding `row`, and its row number there."""
        if len(self.views) == 1:
            return (*self.views[0], row)
        b = bisect.bisect_right(self.starts, row) - 1
        return (*self.views[b], row - self.starts[b])


class TokenBatchBuilder:
    def __init__(self, directory: str | Location, verify: str = "cheap",
                 extra_columns: tuple[str, ...] = ()) -> None:
        self.dataset = Dataset(directory, verify=verify)
        self.extras = ExtraColumns(self.dataset, extra_columns)
        self.dtype = self.dataset.manifest.column("tokens").numpy_dtype
        self.vocab_size = _checkable_vocab_size(self.dataset.manifest, self.dtype)
        self._views: dict[int, TokenViews | None] = {}
        # A remote dataset closes shards it no longer needs: their views must go too.
        self.dataset.on_close(lambda k: self._views.pop(k, None))

    def _shard_views(self, k: int) -> TokenViews | None:
        """Shard k's token column for direct slicing; None for a format without offsets."""
        if k not in self._views:
            reader = self.dataset.shard(k)
            get_views = getattr(reader, "payload_views", None)
            self._views[k] = (TokenViews(reader.batch_starts(), get_views("tokens"))
                              if get_views else None)
        return self._views[k]

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
                offsets, values, local = views.find(row)
                base = int(offsets[local])
                tokens[pos:pos + e - s] = values[base + s:base + e]
            else:
                tokens[pos:pos + e - s] = self._record_tokens(k, row)[s:e]
            pos += e - s
        self._check_ids(tokens[:pos], end - start, shards, rows, start)
        ended = time.perf_counter()
        return {"count": pos, "seg_lengths": end - start, "rows": task.extra["rows"],
                "index": task.indices, "is_padding": task.is_pad,
                "columns": self.extras.of(task.indices),
                "timing": worker_timing(started, ended, {"read": ended - started})}

    def _record_tokens(self, k: int, row: int) -> np.ndarray:
        """A document read record by record (msgpack), checked against its length column:
        that format keeps no offsets to check when the shard is opened."""
        reader = self.dataset.shard(k)
        ids = reader.payload("tokens", row)
        length = reader.scalar("length")[row]
        if len(ids) != length:
            raise reader.corrupt(row, f"holds {len(ids)} tokens, its length column says "
                                      f"{length}")
        return ids

    def _check_ids(self, ids: np.ndarray, seg_lengths: np.ndarray, shards: np.ndarray,
                   rows: np.ndarray, seg_starts: np.ndarray) -> None:
        """Every id below the vocabulary size: one max over the batch; the offending segment is
        looked for only when it fails."""
        if self.vocab_size is None or not len(ids) or ids.max() < self.vocab_size:
            return
        at = int(np.argmax(ids >= self.vocab_size))
        seg_ends = np.cumsum(seg_lengths)
        j = int(np.searchsorted(seg_ends, at, side="right"))
        offset = int(seg_starts[j]) + at - int(seg_ends[j] - seg_lengths[j])
        reader = self.dataset.shard(int(shards[j]))
        raise reader.corrupt(int(rows[j]), f"token {offset} is id {ids[at]}, not below the "
                                           f"vocabulary size {self.vocab_size}")


def _checkable_vocab_size(manifest: Manifest, dtype: np.dtype) -> int | None:
    """The manifest's vocabulary size when some value of the token dtype lies beyond it
    (None: every stored id is possible, nothing to check)."""
    vocab = (manifest.tokenizer or {}).get("vocab_size")
    if not isinstance(vocab, int) or vocab > np.iinfo(dtype).max:
        return None
    return vocab
