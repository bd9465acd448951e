"""Builds one image batch: plan crops for the whole batch, then decode each sample into place."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.errors import ArgumentError, DataError
from datapipe.format.dataset import Dataset
from datapipe.format.sources import Location
from datapipe.image.cpu_decode import decode_into
from datapipe.image.transforms import Pipeline, plan_crops
from datapipe.loader.workers import BatchTask, worker_timing

ON_ERROR = ("raise", "skip")


@dataclass(frozen=True)
class ImageBatchSpec:
    """Everything a worker needs to build batches (small and picklable)."""

    directory: str | Location  # a path or URL
    pipeline: Pipeline
    out_size: tuple[int, int]
    seed: int
    on_error: str = "raise"
    extra_columns: tuple[str, ...] = ()
    verify: str = "cheap"  # see datapipe/format/integrity.py

    def __post_init__(self) -> None:
        if self.on_error not in ON_ERROR:
            raise ArgumentError(f"on_error must be one of {ON_ERROR}, got {self.on_error!r}")

    def slot_nbytes(self, batch_size: int) -> int:
        return batch_size * self.out_size[0] * self.out_size[1] * 3


def batch_rng(seed: int, epoch: int, batch_no: int) -> np.random.Generator:
    """Augmentation randomness: a function of the batch, not of which worker builds it."""
    return np.random.default_rng([seed, epoch, batch_no, 0xA06])


class ImageBatchBuilder:
    def __init__(self, spec: ImageBatchSpec) -> None:
        self.spec = spec
        self.dataset = Dataset(spec.directory, verify=spec.verify)
        self.encoding = self.dataset.manifest.settings.get("encoding", "jpeg")
        self.heights = self.dataset.scalar("height").astype(np.int64)
        self.widths = self.dataset.scalar("width").astype(np.int64)
        self.labels = self.dataset.scalar("label").astype(np.int64)
        self.extras = {name: self._extra_column(name) for name in spec.extra_columns}

    def _extra_column(self, name: str) -> np.ndarray | None:
        column = self.dataset.manifest.column(name)
        return self.dataset.scalar(name) if column.is_scalar else None

    def build(self, task: BatchTask, out: np.ndarray) -> dict[str, Any]:
        started = time.perf_counter()
        h, w = self.spec.out_size
        images = out[: len(task.indices) * h * w * 3].reshape(-1, h, w, 3)
        idx = task.indices
        boxes, flips = plan_crops(self.spec.pipeline, self.heights[idx], self.widths[idx],
                                  batch_rng(self.spec.seed, task.epoch, task.batch_no))
        shards, rows = self.dataset.locate_many(idx)
        kept: list[int] = []
        skipped: list[tuple[int, str]] = []
        read_s = decode_s = 0.0
        for j, index in enumerate(idx.tolist()):
            t0 = time.perf_counter()
            shard = self.dataset.shard(int(shards[j]))
            row = int(rows[j])
            data = shard.payload("image", row).tobytes()  # pages the bytes in from the map
            t1 = time.perf_counter()
            try:
                decode_into(data, self.encoding, int(self.heights[index]),
                            int(self.widths[index]), boxes[j], bool(flips[j]),
                            images[len(kept)])
            except Exception as exc:  # untrusted bytes: any decoder failure names the sample
                reason = f"{shard.path.name} row {row} (sample {index}): cannot decode: " \
                         f"{type(exc).__name__}: {exc}"
                if self.spec.on_error == "raise":
                    raise DataError(reason + " (pass on_error='skip' to skip such samples)") \
                        from None
                skipped.append((index, reason))
                continue
            finally:
                read_s += t1 - t0
                decode_s += time.perf_counter() - t1
            kept.append(j)
        keep = np.asarray(kept, dtype=np.int64)
        meta: dict[str, Any] = {"count": len(kept), "index": idx[keep],
                                "label": self.labels[idx[keep]], "is_padding": task.is_pad[keep],
                                "skipped": skipped}
        for name, values in self.extras.items():
            meta[name] = values[idx[keep]] if values is not None else [
                self.dataset.shard(int(shards[j])).value(name, int(rows[j])) for j in kept]
        ended = time.perf_counter()
        meta["timing"] = worker_timing(started, ended, {"read": read_s, "decode": decode_s})
        return meta
