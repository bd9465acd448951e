"""Builds one token batch: copy each planned segment's ids out of the memory-mapped shards,
and with them a supervised dataset's loss mask and, for a document split across batches, the
target of each piece's last token (the next piece's first)."""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.format.concat import Locations, batch_ids, open_dataset
from datapipe.format.manifest import Manifest
from datapipe.format.sources import Location
from datapipe.loader.extra_columns import ExtraColumns
from datapipe.loader.workers import BatchTask, worker_timing
from datapipe.text.labels import IGNORE

LOSS_MASK = "loss_mask"  # a supervised dataset's per-token column: 1 where the loss counts


def split_slot(buffer: np.ndarray, dtype: np.dtype,
               has_mask: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """A batch buffer's two regions: token ids, then (with a loss mask) one byte per token."""
    capacity = len(buffer) // (dtype.itemsize + int(has_mask))
    tokens = buffer[: capacity * dtype.itemsize].view(dtype)
    if not has_mask:
        return tokens, None
    start = capacity * dtype.itemsize
    return tokens, buffer[start:start + capacity]


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
    def __init__(self, directory: str | Location | Locations, verify: str = "cheap",
                 extra_columns: tuple[str, ...] = ()) -> None:
        self.dataset = open_dataset(directory, verify=verify)
        self.has_mask = LOSS_MASK in self.dataset.manifest.column_names
        self.extras = ExtraColumns(self.dataset, extra_columns)
        self.dtype = self.dataset.manifest.column("tokens").numpy_dtype
        self.vocab_size = _checkable_vocab_size(self.dataset.manifest, self.dtype)
        # Per column, per shard: keyed by the shard's number alone, a lookup per segment.
        self._views: dict[str, dict[int, TokenViews | None]] = {"tokens": {}, LOSS_MASK: {}}
        # A remote dataset closes shards it no longer needs: their views must go too.
        self.dataset.on_close(self._forget_shard)

    def _forget_shard(self, k: int) -> None:
        for views in self._views.values():
            views.pop(k, None)

    def _shard_views(self, k: int, column: str = "tokens") -> TokenViews | None:
        """Shard k's column for direct slicing; None for a format without offsets."""
        cache = self._views[column]
        if k not in cache:
            reader = self.dataset.shard(k)
            get_views = getattr(reader, "payload_views", None)
            cache[k] = TokenViews(reader.batch_starts(), get_views(column)) if get_views else None
        return cache[k]

    def _document(self, k: int, row: int, column: str = "tokens") -> np.ndarray:
        """One document's whole column, as a view where the format allows."""
        views = self._shard_views(k, column)
        if views is None:
            return self._record_tokens(k, row, column)
        offsets, values, local = views.find(row)
        return values[int(offsets[local]):int(offsets[local + 1])]

    def build(self, task: BatchTask, out: np.ndarray) -> dict[str, Any]:
        started = time.perf_counter()
        tokens, mask = split_slot(out, self.dtype, self.has_mask)
        start, end = task.extra["start"], task.extra["end"]
        shards, rows = self.dataset.locate_many(task.indices)
        pos = self._gather_one_shard(tokens, shards, rows, start, end)
        if pos is None:
            pos = self._gather_each(tokens, shards, rows, start, end)
        if mask is not None:
            self._gather_masks(mask, shards, rows, start, end)
        after = self._targets_after(task.extra.get("cut"), shards, rows, end)
        self._check_ids(tokens[:pos], end - start, shards, rows, start)
        ended = time.perf_counter()
        return {"count": pos, "seg_lengths": end - start, "seg_starts": start, "after": after,
                "rows": task.extra["rows"], **batch_ids(self.dataset, task.indices, shards),
                "is_padding": task.is_pad,
                "columns": self.extras.of(task.indices),
                "timing": worker_timing(started, ended, {"read": ended - started})}

    def _gather_one_shard(self, tokens: np.ndarray, shards: np.ndarray, rows: np.ndarray,
                          start: np.ndarray, end: np.ndarray) -> int | None:
        """A batch whose segments all come from one shard holding one offsets column (a corpus
        that fits one shard, as many fine-tuning sets do): every segment's ids in one numpy
        take, where a Python step a segment costs ~1.5-2.5 us (tens a batch). The tokens
        written, or None for the loop below."""
        if not len(shards) or shards[0] != shards[-1] or (shards != shards[0]).any():
            return None
        views = self._shard_views(int(shards[0]))
        if views is None or len(views.views) != 1:
            return None
        offsets, values = views.views[0]
        lengths = end - start
        total = int(lengths.sum())
        # Each token's place in the shard's ids: its segment's first id, then one a token.
        first = offsets[rows] + start - (np.cumsum(lengths) - lengths)
        np.take(values, np.repeat(first, lengths) + np.arange(total), out=tokens[:total])
        return total

    def _gather_each(self, tokens: np.ndarray, shards: np.ndarray, rows: np.ndarray,
                     start: np.ndarray, end: np.ndarray) -> int:
        """The segments one at a time (several shards, or msgpack's records)."""
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
        return pos

    def _gather_masks(self, mask: np.ndarray, shards: np.ndarray, rows: np.ndarray,
                      start: np.ndarray, end: np.ndarray) -> None:
        """Each segment's loss mask beside its ids (a supervised dataset only)."""
        pos = 0
        for k, row, s, e in zip(shards.tolist(), rows.tolist(), start.tolist(), end.tolist(),
                                strict=True):
            mask[pos:pos + e - s] = self._loss_mask(k, row)[s:e]
            pos += e - s

    def _targets_after(self, cut: np.ndarray | None, shards: np.ndarray, rows: np.ndarray,
                       end: np.ndarray) -> np.ndarray:
        """Per segment, the target of its last token: -100, but for a piece cut before its
        document's end (`cut`), the next token, if the loss mask counts it. Only the cut
        pieces are looked at: a step per split document, none per whole one."""
        after = np.full(len(end), IGNORE, dtype=np.int64)
        for j in np.flatnonzero(cut).tolist() if cut is not None else ():
            k, row, e = int(shards[j]), int(rows[j]), int(end[j])
            if not self.has_mask or self._loss_mask(k, row)[e]:
                after[j] = self._document(k, row)[e]
        return after

    def _record_tokens(self, k: int, row: int, column: str = "tokens") -> np.ndarray:
        """A document read record by record (msgpack), checked against its length column:
        that format keeps no offsets to check when the shard is opened."""
        reader = self.dataset.shard(k)
        ids = reader.payload(column, row)
        length = reader.scalar("length")[row]
        if len(ids) != length:
            raise reader.corrupt(row, f"holds {len(ids)} {column} values, its length column "
                                      f"says {length}")
        return ids

    def _loss_mask(self, k: int, row: int) -> np.ndarray:
        """A document's loss mask, one value per token (a mask of another length would
        silently shift every label after it)."""
        values = self._document(k, row, LOSS_MASK)
        length = len(self._document(k, row))
        if len(values) != length:
            raise self.dataset.shard(k).corrupt(row, f"has {len(values)} loss_mask values for "
                                                     f"{length} tokens")
        return values

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
