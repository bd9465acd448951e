"""Builds one image batch: plan crops for the whole batch, then decode each sample into place."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.errors import ArgumentError, DataError
from datapipe.format.concat import Locations, batch_ids, open_dataset, sample_where
from datapipe.format.shard_reader import ShardReader
from datapipe.format.sources import Location
from datapipe.image.cpu_decode import decode_into
from datapipe.image.normalize import NUMPY_DTYPES
from datapipe.image.placement import ViewSpec
from datapipe.image.transforms import Normalize, Pipeline, plan_crops
from datapipe.image.worker_steps import StepFailed, ViewDecoder
from datapipe.loader.caption_batches import CaptionCollator, aligned, caption_region
from datapipe.loader.caption_fields import CaptionLayout
from datapipe.loader.class_labels import BatchLabels
from datapipe.loader.extra_columns import ExtraColumns
from datapipe.loader.workers import BatchTask, worker_timing

ON_ERROR = ("raise", "skip")


@dataclass(frozen=True)
class ImageBatchSpec:
    """Everything a worker needs to build batches (small and picklable). A batch buffer holds
    each view's images in turn (one view unless the loader was given `views=`)."""

    directory: str | Location | Locations  # a path or URL; several: a mixture's sources
    views: tuple[ViewSpec, ...]
    seed: int
    on_error: str = "raise"
    extra_columns: tuple[str, ...] = ()
    verify: str = "cheap"  # see datapipe/format/integrity.py
    # Per dataset, the loader's label of each of its labels (None: as stored): class_labels.py
    label_maps: tuple[tuple[int, ...], ...] | None = None
    captions: CaptionLayout | None = None  # drawn captions collated after the images

    def __post_init__(self) -> None:
        if self.on_error not in ON_ERROR:
            raise ArgumentError(f"on_error must be one of {ON_ERROR}, got {self.on_error!r}")

    # The first view's settings: the whole batch's when there is one view (DALI's case).
    @property
    def pipeline(self) -> Pipeline:
        return self.views[0].pipeline

    @property
    def out_size(self) -> tuple[int, int]:
        return self.views[0].out_size

    @property
    def normalize(self) -> Normalize | None:
        return self.views[0].normalize

    @property
    def pixel_dtype(self) -> str:
        """What a batch buffer holds: "uint8", or a float dtype (Normalize's)."""
        return self.views[0].pixel_dtype

    def image_nbytes(self, count: int) -> int:
        return self.views[0].nbytes(count)

    def view_offsets(self, capacity: int) -> list[int]:
        """Where each view's images start in a buffer laid out for `capacity` samples."""
        offsets = [0]
        for view in self.views[:-1]:
            offsets.append(offsets[-1] + view.nbytes(capacity))
        return offsets

    def caption_offset(self, capacity: int) -> int:
        """Where the caption rows start in a buffer laid out for `capacity` samples."""
        return aligned(sum(view.nbytes(capacity) for view in self.views))

    def slot_nbytes(self, batch_size: int) -> int:
        images = sum(view.nbytes(batch_size) for view in self.views)
        if self.captions is None:
            return images
        return self.caption_offset(batch_size) + caption_region(self.captions, batch_size)


def batch_rng(seed: int, epoch: int, batch_no: int, view: int = 0) -> np.random.Generator:
    """Augmentation randomness: a function of the batch, not of which worker builds it; each
    view draws its crops from a stream of its own."""
    key = [seed, epoch, batch_no, 0xA06] + ([view] if view else [])
    return np.random.default_rng(key)


class ImageBatchBuilder:
    def __init__(self, spec: ImageBatchSpec) -> None:
        self.spec = spec
        self.dataset = open_dataset(spec.directory, verify=spec.verify)
        self.encoding = self.dataset.manifest.settings.get("encoding", "jpeg")
        # Memory-mapped in their stored dtypes: the node's page cache, not a copy per worker;
        # gathered per batch (plan_crops computes in int64 whatever it is given).
        self.heights = self.dataset.scalar_map("height")
        self.widths = self.dataset.scalar_map("width")
        self.labels = BatchLabels(self.dataset, spec.label_maps)
        self.extras = ExtraColumns(self.dataset, spec.extra_columns)
        self.decoders = [ViewDecoder(view, v, spec.seed) for v, view in enumerate(spec.views)]
        self.captions = CaptionCollator(self.dataset, spec.captions, spec.seed) \
            if spec.captions else None

    def _view_images(self, out: np.ndarray, count: int) -> list[np.ndarray]:
        images = []
        for view, offset in zip(self.spec.views, self.spec.view_offsets(count), strict=True):
            h, w = view.out_size
            images.append(out[offset: offset + view.nbytes(count)]
                          .view(NUMPY_DTYPES[view.pixel_dtype]).reshape(-1, h, w, 3))
        return images

    def _plans(self, task: BatchTask, heights: np.ndarray,
               widths: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        return [plan_crops(view.pipeline, heights, widths,
                           batch_rng(self.spec.seed, task.epoch, task.batch_no, v))
                for v, view in enumerate(self.spec.views)]

    def build(self, task: BatchTask, out: np.ndarray) -> dict[str, Any]:
        started = time.perf_counter()
        idx = task.indices
        images = self._view_images(out, len(idx))
        heights, widths = self.heights[idx], self.widths[idx]  # the batch's, gathered once
        plans = self._plans(task, heights, widths)
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
                for decoder, (boxes, flips), view_images in zip(self.decoders, plans, images,
                                                                strict=True):
                    row_out = view_images[len(kept)]
                    decode_into(data, self.encoding, int(heights[j]), int(widths[j]),
                                boxes[j], bool(flips[j]),
                                decoder.decode_target(row_out), decoder.table)
                    decoder.finish(row_out, task.epoch, index)
            except StepFailed as exc:
                self._refuse_or_skip(f"{self._where(shard, row, index)}: {exc}", index, skipped,
                                     exc.__cause__)
                continue
            except ArgumentError:
                raise  # a step's wrong output: the step's fault, not the sample's
            except Exception as exc:  # untrusted bytes: any decoder failure names the sample
                self._refuse_or_skip(f"{self._where(shard, row, index)}: cannot decode: "
                                     f"{type(exc).__name__}: {exc}", index, skipped)
                continue
            finally:
                read_s += t1 - t0
                decode_s += time.perf_counter() - t1
            kept.append(j)
        keep = np.asarray(kept, dtype=np.int64)
        meta: dict[str, Any] = {"count": len(kept), "capacity": len(idx),
                                **batch_ids(self.dataset, idx[keep], shards[keep]),
                                "label": self.labels[idx[keep]],
                                "is_padding": task.is_pad[keep], "skipped": skipped}
        meta["columns"] = {**self.extras.of(idx[keep]), **self._sample_fields(keep)}
        stages = self._stages(read_s, decode_s)
        if self.captions is not None:
            t0 = time.perf_counter()
            offset = self.spec.caption_offset(len(idx))
            meta.update(self.captions.fill(task.epoch, idx[keep], shards[keep], rows[keep],
                                           out[offset:]))
            stages["captions"] = time.perf_counter() - t0
        meta["timing"] = worker_timing(started, time.perf_counter(), stages)
        return meta

    def _sample_fields(self, keep: np.ndarray) -> dict[str, np.ndarray]:
        """Per-sample fields a builder adds to the batch (of the kept places `keep`)."""
        return {}

    def _where(self, shard: ShardReader, row: int, index: int) -> str:
        return sample_where(self.dataset, shard, row, index)

    def _refuse_or_skip(self, reason: str, index: int, skipped: list[tuple[int, str]],
                        cause: BaseException | None = None) -> None:
        if self.spec.on_error == "raise":
            error = DataError(reason + " (pass on_error='skip' to skip such samples)")
            raise error from cause
        skipped.append((index, reason))

    def _stages(self, read_s: float, decode_s: float) -> dict[str, float]:
        """Seconds per stage: each sample step by its name, decoding the rest."""
        stages = {"read": read_s, "decode": decode_s}
        for decoder in self.decoders:
            for name, seconds in decoder.take_step_seconds().items():
                stages[name] = stages.get(name, 0.0) + seconds
                stages["decode"] -= seconds
        return stages
