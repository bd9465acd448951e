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
from datapipe.image.normalize import NUMPY_DTYPES, normalize_table
from datapipe.image.transforms import Normalize, Pipeline, plan_crops
from datapipe.loader.extra_columns import ExtraColumns
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
    normalize: Normalize | None = None  # done while decoding: the batch then holds its dtype

    def __post_init__(self) -> None:
        if self.on_error not in ON_ERROR:
            raise ArgumentError(f"on_error must be one of {ON_ERROR}, got {self.on_error!r}")

    @property
    def pixel_dtype(self) -> str:
        """What a batch buffer holds: "uint8", or Normalize's dtype."""
        return self.normalize.dtype if self.normalize else "uint8"

    def image_nbytes(self, count: int) -> int:
        itemsize = NUMPY_DTYPES[self.pixel_dtype].itemsize
        return count * self.out_size[0] * self.out_size[1] * 3 * itemsize

    def slot_nbytes(self, batch_size: int) -> int:
        return self.image_nbytes(batch_size)


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
        self.extras = ExtraColumns(self.dataset, spec.extra_columns)
        self.table = normalize_table(spec.normalize) if spec.normalize else None

    def build(self, task: BatchTask, out: np.ndarray) -> dict[str, Any]:
        started = time.perf_counter()
        h, w = self.spec.out_size
        images = out[: self.spec.image_nbytes(len(task.indices))] \
            .view(NUMPY_DTYPES[self.spec.pixel_dtype]).reshape(-1, h, w, 3)
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
                            images[len(kept)], self.table)
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
        meta["columns"] = self.extras.of(idx[keep])
        ended = time.perf_counter()
        meta["timing"] = worker_timing(started, ended, {"read": read_s, "decode": decode_s})
        return meta
