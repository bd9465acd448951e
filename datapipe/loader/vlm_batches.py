"""Builds one packed VLM batch in a worker: each sample's ids expanded around its images
(vlm_sequences.py), and its images' patches decoded and laid out in the model's order straight
into the shared-memory buffer (the patch producer), in the order the samples are packed.

The buffer holds pixel_values (capacity, patch_dim) float32, then the token rows (TOKEN_ROWS,
max_tokens) int64: input_ids, labels, the four rows of position_ids, mm_token_type_ids and
seq_idx, written in place; only per-sample numbers (grids, boundaries) travel as metadata.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.errors import DataError
from datapipe.format.concat import Locations, batch_ids, open_dataset
from datapipe.format.sources import Location
from datapipe.image.patch_geometry import GridGeometry
from datapipe.image.patch_producer import PatchProducer, PatchSpec
from datapipe.loader.vlm_sequences import Sequence, expand_sample
from datapipe.loader.workers import BatchTask, worker_timing
from datapipe.text.labels import IGNORE

# The token rows of a buffer, by name: position_ids' four rows are POSITIONS.
ROWS = {"input_ids": 0, "labels": 1, "mm_token_type_ids": 6, "seq_idx": 7}
POSITIONS = slice(2, 6)
TOKEN_ROWS = 8


@dataclass(frozen=True)
class VLMBatchSpec:
    """Everything a worker needs to build VLM batches (small and picklable)."""

    directory: str | Location | Locations
    patches: PatchSpec
    capacity: int  # patch rows a buffer holds
    max_tokens: int  # token columns
    verify: str = "cheap"

    def _pixel_nbytes(self) -> int:
        return self.capacity * self.patches.patch_dim * 4

    def slot_nbytes(self) -> int:
        return self._pixel_nbytes() + TOKEN_ROWS * self.max_tokens * 8

    def pixels(self, out: np.ndarray) -> np.ndarray:
        return out[:self._pixel_nbytes()].view(np.float32).reshape(self.capacity, -1)

    def token_rows(self, out: np.ndarray) -> np.ndarray:
        """(TOKEN_ROWS, max_tokens) int64: see ROWS."""
        start = self._pixel_nbytes()
        return out[start:self.slot_nbytes()].view(np.int64).reshape(TOKEN_ROWS, -1)


@dataclass
class _Sample:
    ids: np.ndarray
    mask: np.ndarray | None
    placeholders: np.ndarray
    sizes: np.ndarray  # (n, 2) stored heights, widths
    payloads: list[np.ndarray]


def pack_into(pieces: list[Sequence], rows: np.ndarray) -> dict[str, Any]:
    """The samples back to back into the buffer's token `rows`, as the model's forward takes
    them (here, in the worker: the training thread only wraps them): input_ids, labels,
    position_ids (4, T): the text positions (each sample from 0: transformers reads sample
    boundaries from them) above the three M-RoPE rows, mm_token_type_ids (1 on image tokens),
    seq_idx. Returns the per-sample numbers: cu_seqlens, max_seqlen, tokens, loss_tokens."""
    lengths = np.asarray([len(p.input_ids) for p in pieces], np.int64)
    ends = np.cumsum(lengths)
    at = 0
    for p in pieces:
        n = len(p.input_ids)
        rows[ROWS["input_ids"], at:at + n] = p.input_ids
        rows[ROWS["labels"], at:at + n] = p.labels
        rows[POSITIONS.start, at:at + n] = np.arange(n)
        rows[POSITIONS.start + 1:POSITIONS.stop, at:at + n] = p.rope
        rows[ROWS["mm_token_type_ids"], at:at + n] = p.is_image
        at += n
    rows[ROWS["seq_idx"], :at] = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    return {"cu_seqlens": np.concatenate([[0], ends]).astype(np.int32),
            "max_seqlen": int(lengths.max()) if len(lengths) else 0, "tokens": at,
            "loss_tokens": int((rows[ROWS["labels"], :at] != IGNORE).sum())}


class VLMBatchBuilder:
    def __init__(self, spec: VLMBatchSpec) -> None:
        self.spec = spec
        self.dataset = open_dataset(spec.directory, verify=spec.verify)
        images = self.dataset.manifest.settings.get("images") or {}
        self.encoding = images.get("encoding", "jpeg")
        self.producer = PatchProducer(spec.patches)
        self.geometry: GridGeometry = spec.patches.geometry

    def build(self, task: BatchTask, out: np.ndarray) -> dict[str, Any]:
        started = time.perf_counter()
        shards, rows = self.dataset.locate_many(task.indices)
        pixels = self.spec.pixels(out)
        pieces, grids, patches, read_s = [], [], 0, 0.0
        for k, row in zip(shards.tolist(), rows.tolist(), strict=True):
            t0 = time.perf_counter()
            sample = self._read(k, row)
            read_s += time.perf_counter() - t0
            grid, patches = self._patches(sample, k, row, pixels, patches)
            grids.append(grid)
            pieces.append(expand_sample(sample.ids, sample.mask, sample.placeholders, grid,
                                        self.geometry.merge_size))
        ended = time.perf_counter()
        return {**pack_into(pieces, self.spec.token_rows(out)), "patches": patches,
                "grids": np.concatenate(grids) if grids else np.zeros((0, 2), np.int64),
                **batch_ids(self.dataset, task.indices, shards), "is_padding": task.is_pad,
                "timing": worker_timing(started, ended, {"read": read_s,
                                                         "decode": ended - started - read_s})}

    def _read(self, k: int, row: int) -> _Sample:
        shard = self.dataset.shard(k)  # a mixture's shards may hold plain SFT: no images
        ids = shard.payload("tokens", row)
        mask = shard.payload("loss_mask", row) if "loss_mask" in shard.columns else None
        if "images" not in shard.columns:
            return _Sample(ids, mask, np.zeros(0, np.int64), np.zeros((0, 2), np.int64), [])
        placeholders = shard.payload("image_positions", row).astype(np.int64)
        sizes = shard.payload("image_sizes", row).astype(np.int64).reshape(-1, 2)
        nbytes = shard.payload("image_nbytes", row)
        ends = np.cumsum(nbytes)
        data = shard.payload("images", row)
        if len(placeholders) != len(sizes) or len(ends) != len(sizes) or \
                (len(ends) and ends[-1] != len(data)):
            raise shard.corrupt(row, f"has {len(placeholders)} image placeholders, "
                                     f"{len(sizes)} image sizes and {len(ends)} images")
        payloads = [data[e - n:e] for n, e in zip(nbytes.tolist(), ends.tolist(), strict=True)]
        return _Sample(ids, mask, placeholders, sizes, payloads)

    def _patches(self, sample: _Sample, k: int, row: int, pixels: np.ndarray,
                 at: int) -> tuple[np.ndarray, int]:
        """The sample's images' patches into `pixels` from row `at`: (their grids, the next
        free row)."""
        heights, widths = sample.sizes[:, 0], sample.sizes[:, 1]
        th, tw = self.geometry.target_sizes(heights, widths)
        p = self.geometry.patch_size
        for j, payload in enumerate(sample.payloads):
            n = int(th[j] // p * (tw[j] // p))
            try:
                self.producer.produce(payload.tobytes(), self.encoding,
                                      (int(heights[j]), int(widths[j])),
                                      (int(th[j]), int(tw[j])), False, pixels[at:at + n])
            except Exception as exc:  # untrusted bytes: any decoder failure names the sample
                raise DataError(f"{self.dataset.shard(k).path.name} row {row}: image {j} "
                                f"cannot be decoded: {type(exc).__name__}: {exc}") from exc
            at += n
        return np.stack([th // p, tw // p], axis=1).astype(np.int64), at
