"""Batches of aspect-ratio buckets (`Loader(..., buckets=dp.image.Buckets(...))`).

A batch's task names its bucket (the plan's `extra`); the worker plans each image's cover
resize and crop to the bucket's size from its stored size (image/buckets.py) and decodes the
crop's region alone, at a reduced DCT scale where it can, through the same per-sample path as
any batch (flip, the sample steps, Normalize). Batch buffers are sized for the largest bucket;
a batch fills the front of one, and says its bucket so the loader views its images at that
bucket's size. Beside `image` each batch holds SDXL's size conditioning per sample:
`original_size` and `target_size` (height, width) and `crop_top_left` (top, left), int64.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.image.bucket_index import BucketIndex
from datapipe.image.buckets import Buckets, plan_cover_crops
from datapipe.image.steps import PerSample
from datapipe.image.transforms import Pipeline
from datapipe.image.worker_steps import ViewDecoder
from datapipe.loader.batch_loop import BatchProducer
from datapipe.loader.image_batches import ImageBatchBuilder, ImageBatchSpec, batch_rng
from datapipe.loader.mixing import describe
from datapipe.loader.progress_state import LoaderPosition
from datapipe.loader.workers import BatchTask
from datapipe.sampling.bucket_order import BucketEpoch, BucketLayout, BucketStream
from datapipe.sampling.elastic import Remainder, follow
from datapipe.sampling.mixture_weights import WeightSchedule

BUCKET_FIELDS = ("original_size", "crop_top_left", "target_size")


def check_buckets(buckets: Any, pipelines: list[Pipeline], views: Any, decode: str,
                  mixture: Any) -> Buckets | None:
    """`buckets` checked against the loader's other arguments: what cannot be bucketed is
    refused in one line, before anything starts."""
    if buckets is None:
        return None
    if not isinstance(buckets, Buckets):
        raise ArgumentError(f"buckets must be a datapipe.image.Buckets (Buckets.of(sizes) or "
                            f"Buckets.kohya(...)), got {type(buckets).__name__}")
    if views is not None:
        raise ArgumentError("views= cannot be used with buckets: a bucketed batch has one "
                            "image per sample, at its bucket's size")
    if decode != "cpu":
        raise ArgumentError("buckets need decode='cpu': the workers plan each bucket's crops")
    if mixture and buckets.max_pixels is not None:
        _check_no_phases(mixture)
    for step in pipelines[0].steps:
        if step.kind == "geometry":
            raise ArgumentError(f"{type(step).__name__} fixes the output size, which buckets "
                                "choose per batch: leave it out (Buckets(crop='random' | "
                                "'center') crops each image to its bucket)")
        if isinstance(step, PerSample) and step.shape is not None:
            raise ArgumentError(f"{step.stage_name} sets shape={step.shape}, but with buckets "
                                "each batch has its bucket's size: leave shape= out")
    return buckets


def _check_no_phases(mixture: Any) -> None:
    """A mixture's phases begin at a step of batch_size x world_size samples (as unbucketed),
    which a pixel budget per batch leaves without meaning: refused, and so is reweight=True,
    which makes phases of a saved state's weights."""
    phases = 1 if mixture.weights is None else len(
        WeightSchedule.parse(mixture.weights, mixture.sources.names).phases)
    if phases > 1 or mixture.reweight:
        raise ArgumentError(f"{'reweight=True' if phases == 1 else 'weights'}: a mixture's "
                            "phases begin at a step of batch_size samples, which "
                            "Buckets(max_pixels=...) does not fix; give one set of weights, or "
                            "batch_size instead of max_pixels")


def largest(buckets: Buckets) -> tuple[int, int]:
    return max(buckets.sizes, key=lambda hw: hw[0] * hw[1])


@dataclass(frozen=True)
class BucketBatchSpec:
    """The loader's batch spec once per bucket: its one view at the bucket's size."""

    base: ImageBatchSpec
    sizes: tuple[tuple[int, int], ...]
    crop: str
    per_bucket: tuple[ImageBatchSpec, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        view = self.base.views[0]
        object.__setattr__(self, "per_bucket", tuple(
            dataclasses.replace(self.base, views=(dataclasses.replace(
                view, decode_size=size, out_size=size),)) for size in self.sizes))


class BucketBatchBuilder(ImageBatchBuilder):
    """A worker's builder of bucketed batches: the bucket's spec and decoders per task, the
    cover crops planned from the batch's randomness (keyed by its global batch, so the same
    at any world size)."""

    def __init__(self, spec: BucketBatchSpec) -> None:
        super().__init__(spec.base)
        self.buckets = spec
        self._bucket_decoders: dict[int, list[Any]] = {}
        self._geometry: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def build(self, task: BatchTask, out: np.ndarray) -> dict[str, Any]:
        k = int(task.extra["bucket"])  # type: ignore[index]  # a bucket plan's tasks have it
        self.spec = self.buckets.per_bucket[k]
        if k not in self._bucket_decoders:  # each bucket's scratch images at its size
            self._bucket_decoders[k] = [ViewDecoder(view, v, self.spec.seed)
                                        for v, view in enumerate(self.spec.views)]
        self.decoders = self._bucket_decoders[k]
        meta = super().build(task, out)
        meta["bucket"] = k
        return meta

    def _plans(self, task: BatchTask, heights: np.ndarray,
               widths: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        rng = batch_rng(self.spec.seed, task.epoch, int(task.extra["global"]))  # type: ignore
        flip = self.spec.pipeline.flip
        flips = rng.random(len(heights)) < flip.p if flip else np.zeros(len(heights), bool)
        boxes, corners = plan_cover_crops(self.spec.out_size, heights, widths,
                                          self.buckets.crop, flips, rng)
        self._geometry = (np.asarray(heights, np.int64), np.asarray(widths, np.int64), corners)
        return [(boxes, flips)]

    def _sample_fields(self, keep: np.ndarray) -> dict[str, np.ndarray]:
        heights, widths, corners = self._geometry  # type: ignore[misc]  # set by _plans
        return {"original_size": np.stack([heights[keep], widths[keep]], axis=1),
                "crop_top_left": np.ascontiguousarray(corners[keep]),
                "target_size": np.tile(np.asarray(self.spec.out_size, np.int64),
                                       (len(keep), 1))}


class BucketingBase:
    """What a bucketed Loader adds: the buffers for the largest bucket's batch, the spec a
    batch was built with, the identity a state must match. Subclasses plan each epoch
    (`start`) and count `progress` (one dataset here, a mixture in bucket_mixing.py)."""

    def __init__(self, buckets: Buckets, spec: ImageBatchSpec, batch_size: int) -> None:
        self.buckets = buckets
        self.batch_sizes = buckets.batch_sizes(batch_size)
        self.spec = BucketBatchSpec(spec, buckets.sizes, buckets.crop)

    def start(self, epoch: int, mixture: Any = None) -> Remainder:
        raise NotImplementedError

    def progress(self, position: LoaderPosition, world_size: int,
                 mixture: Any = None) -> dict[str, dict[str, int]]:
        raise NotImplementedError

    def producer(self, num_workers: int, prefetch: int, persistent: bool) -> BatchProducer:
        nbytes = max(spec.slot_nbytes(size) for spec, size in
                     zip(self.spec.per_bucket, self.batch_sizes, strict=True))
        return BatchProducer(_Maker(self.spec), num_workers, prefetch, nbytes, persistent)

    def spec_of(self, meta: dict[str, Any]) -> ImageBatchSpec:
        return self.spec.per_bucket[meta["bucket"]]

    def identity(self) -> dict[str, Any]:
        return {"buckets": {**self.buckets.identity(), "batch_sizes": list(self.batch_sizes)}}


class Bucketing(BucketingBase):
    """One dataset's bucketed epochs: its bucket index laid out, and the images drawn."""

    def __init__(self, buckets: Buckets, index: BucketIndex, spec: ImageBatchSpec,
                 loader: Any) -> None:
        super().__init__(buckets, spec, loader.batch_size)
        self.layout = BucketLayout(index.ids, index.offsets, self.batch_sizes,
                                   loader.drop_last, loader.seed, loader.shuffle)
        self.per_epoch = self.layout.images(self.layout.batches)
        self.where = describe(loader.path)
        summary = index.summary
        if summary.far:
            warnings.warn(f"{self.where}: {summary.far} of {summary.count} images are further "
                          f"than max_aspect_error={buckets.max_aspect_error} from every "
                          f"bucket's aspect ratio (worst {summary.worst:.2f}, a log-ratio); "
                          "each goes to the nearest bucket and its crop cuts more",
                          RuntimeWarning, stacklevel=4)
        if not sum(self.layout.batches):
            warnings.warn(f"{self.where}: drop_last=True drops every batch: every bucket holds "
                          f"fewer images than its batch size {self.batch_sizes}",
                          RuntimeWarning, stacklevel=4)

    def start(self, epoch: int, mixture: Any = None) -> BucketStream:
        return BucketStream(BucketEpoch(self.layout, epoch))

    def progress(self, position: LoaderPosition, world_size: int,
                 mixture: Any = None) -> dict[str, dict[str, int]]:
        """Images all ranks drew: the epochs before whole, then this one's global batches."""
        rest = follow(self.start(position.epoch), position.segments, position.epoch)
        rest = rest.after(world_size, position.batches_done)
        drawn = position.epoch * self.per_epoch + rest.epoch.images_before(rest.drawn)
        return {self.where: {"samples": drawn}}


@dataclass(frozen=True)
class _Maker:
    """Makes a worker's builder (picklable, for spawned workers too)."""

    spec: BucketBatchSpec

    def __call__(self) -> BucketBatchBuilder:
        return BucketBatchBuilder(self.spec)
