"""`Loader`: a drop-in replacement for torch's DataLoader over datapipe image shards."""

from __future__ import annotations

import dataclasses
import functools
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from datapipe.errors import ArgumentError
from datapipe.format.captions import CAPTION_IDS, CAPTION_LENGTHS, CaptionInfo
from datapipe.format.concat import SOURCE_FIELD, ConcatDataset, open_dataset
from datapipe.format.integrity import check_verify_mode
from datapipe.format.sources import resolve_location
from datapipe.image.batch_ops import BatchTransforms
from datapipe.image.bucket_index import bucket_index
from datapipe.image.buckets import Buckets
from datapipe.image.cpu_decode import warn_if_slow_path
from datapipe.image.placement import check_picklable, place_steps
from datapipe.image.transforms import Pipeline, Transform
from datapipe.loader.arguments import check_counter, check_flag, check_optional
from datapipe.loader.base import LoaderBase
from datapipe.loader.batch_loop import BatchProducer
from datapipe.loader.bucket_batches import BUCKET_FIELDS, check_buckets, largest
from datapipe.loader.bucket_mixing import make_bucketing
from datapipe.loader.caption_batches import caption_tensors
from datapipe.loader.caption_fields import CAPTION_FIELDS, Captions, as_captions, dataset_captions
from datapipe.loader.class_labels import ClassesArg, ClassLabels, check_classes, resolve_classes
from datapipe.loader.device import DeviceFeed, resolve_device
from datapipe.loader.distributed import resolve_rank
from datapipe.loader.extra_columns import add_to_batch
from datapipe.loader.extra_columns import choose as extra_column_names
from datapipe.loader.image_batches import ImageBatchBuilder, ImageBatchSpec
from datapipe.loader.image_views import (
    check_image_dataset,
    output_size,
    view_of,
    view_pipelines,
)
from datapipe.loader.mixing import check_mixture_arguments, describe, samples_drawn
from datapipe.loader.progress_state import manifest_fingerprint
from datapipe.sampling.elastic import follow
from datapipe.sampling.mixture import Mixture, MixtureRemainder
from datapipe.sampling.mixture_weights import ScheduleArg
from datapipe.sampling.order import EpochPlan, KeyedOrder, SampleRemainder
from datapipe.system import available_cores

DECODERS = ("cpu", "dali")
# The columns a batch holds as its own fields (image, label) or reads to make them.
STANDARD_COLUMNS = {"image", "label", "height", "width", "path", CAPTION_IDS, CAPTION_LENGTHS}


class Loader(LoaderBase):
    """Batches of images from a datapipe image dataset.

    Each batch is a dict: ``image`` (uint8, shape N x C x H x W in channels-last memory, or
    normalised floats with ``Normalize``), ``label`` and ``index`` (int64: global sample ids),
    ``is_padding`` (bool: samples repeated so every rank runs the same number of steps), plus
    the dataset's extra columns. ``fields=("image", "label")`` yields that tuple instead of the
    dict, for loops written for DataLoader (``for images, target in loader``).

    ``transform`` may hold the user's own steps (``PerSample``, ``PerBatch``, any
    ``SampleStep`` / ``BatchStep``): see docs/augmentation.md for where each runs. A step that
    changes labels (Mixup) puts its labels in ``label``. ``views=(t1, t2, ...)`` instead of
    ``transform`` makes one image per view of each sample, each with its own crop: ``image``
    is then a tuple of tensors, one per view.

    ``rank``/``world_size`` default to torch.distributed's. Each rank gets ceil(N / world_size)
    samples, the shortfall repeated and flagged ``is_padding``; ``drop_last`` then drops the
    incomplete last batch of that share. Batches are views of shared buffers, never reused
    while anything refers to them.

    ``verify="cheap"`` (the default) checks each shard's structure and scalar columns as it is
    opened (labels within the manifest's classes, image sizes possible): a failure is a
    ``DataError`` naming the shard, row and sample, whatever ``on_error`` says. Each image's
    stored size is also checked against its JPEG header as it is decoded: a mismatch is a decode
    failure, which ``on_error`` governs. ``verify="open"`` also hashes every shard against the
    manifest when the loader is made (once: workers inherit the result).

    ``path`` may be a URL (``s3://bucket/prefix``, ``gs://``, ``az://``, any fsspec protocol):
    shards then stream into a node-local cache (``cache_dir``, else ``$DATAPIPE_CACHE_DIR``,
    else ``~/.cache/datapipe``; at most ``cache_size`` bytes, e.g. ``"200GB"``, else
    ``$DATAPIPE_CACHE_SIZE``, else 100 GB), shared by every process on the node; see
    docs/REMOTE.md.

    ``path`` may also name several datasets, a list or a dict name -> path (local and remote
    mixed), read as a *mixture* by ``weights=`` (by samples; default: their sizes) over epochs
    of ``epoch_size`` samples (default: all of them): each batch holds each source within one
    sample of its share, and gains ``source`` (int64 per sample: the index into the list or the
    dict's order) while ``index`` stays the id within the sample's own dataset. ``weights``
    may be a list of ``(start_step, weights)`` phases; ``loader.progress()`` counts what each
    source gave. See docs/mixtures.md.

    ``classes="union"`` or ``classes=[names]`` gives the loader one class list where the
    datasets' classes differ (a mixture's, else refused) or are not in the order a model wants:
    the sorted union of their class names, or your list (naming every class of every dataset);
    each dataset's labels are renumbered to it by name in the workers. ``loader.classes`` is the
    list a batch's labels index (the datasets' own, without ``classes=``; None where they have
    no class names).

    A dataset converted with captions (``--tokenizer``) hands out, beside ``image``,
    ``input_ids`` and ``attention_mask`` (B, L) int64 and ``caption_index`` (which caption of
    the sample was drawn: a pure function of seed, epoch and index), collated in the workers
    (with ``decode="dali"``, in the thread that prepares DALI's inputs).
    ``captions="openclip" | "clip" | "siglip"`` or ``dp.Captions(context_length=...,
    padding="max_length" | "longest", pad_id=...)`` shapes them; ``captions=False`` leaves them
    out. See docs/captions.md.

    ``buckets=dp.image.Buckets.of(sizes) | Buckets.kohya(...)`` batches images at their own
    aspect ratio (SDXL, kohya): each batch one bucket's, with ``original_size``,
    ``crop_top_left`` and ``target_size`` (B, 2) int64; a mixture's too. See docs/buckets.md.
    """

    def __init__(self, path: str | Path | Sequence[str | Path] | Mapping[str, str | Path],
                 batch_size: int = 256, *, shuffle: bool = True,
                 seed: int = 0, num_workers: int | None = None, decode: str = "cpu",
                 transform: Transform | None = None, device: str | torch.device = "cpu",
                 drop_last: bool = False, persistent: bool = True, rank: int | None = None,
                 world_size: int | None = None, prefetch: int = 2, on_error: str = "raise",
                 extra_columns: tuple[str, ...] | None = None, verify: str = "cheap",
                 cache_dir: str | Path | None = None, cache_size: int | str | None = None,
                 fields: Iterable[str] | None = None,
                 views: tuple[Transform, ...] | None = None, weights: ScheduleArg | None = None,
                 epoch_size: int | None = None, reweight: bool = False,
                 classes: ClassesArg = None, captions: str | Captions | bool | None = None,
                 buckets: Buckets | None = None) -> None:
        batch_size = check_counter("batch_size", batch_size, minimum=1)
        prefetch = check_counter("prefetch", prefetch, minimum=1)
        seed = check_counter("seed", seed)
        num_workers = check_optional("num_workers", num_workers)
        shuffle, drop_last, persistent = (check_flag("shuffle", shuffle),
                                          check_flag("drop_last", drop_last),
                                          check_flag("persistent", persistent))
        if decode not in DECODERS:
            raise ArgumentError(f"decode must be one of {DECODERS}, got {decode!r}")
        verify = check_verify_mode(verify)
        epoch_size = check_optional("epoch_size", epoch_size, minimum=1)
        wanted_classes = check_classes(classes)
        asked_captions = as_captions(captions)
        self.mixing = check_mixture_arguments(path, weights, epoch_size, reweight, cache_dir,
                                              cache_size)
        super().__init__(describe(path), fields)
        self.path = (self.mixing.sources.locations if self.mixing
                     else resolve_location(path, cache_dir, cache_size))
        self.batch_size, self.shuffle, self.seed, self.drop_last = (batch_size, shuffle, seed,
                                                                    drop_last)
        self.num_workers = available_cores() if num_workers is None else num_workers
        self.rank, self.world_size = resolve_rank(rank, world_size)
        self._group_implicit = rank is None and world_size is None
        self.device = resolve_device(device)
        self.decode = decode
        if decode == "cpu":
            warn_if_slow_path()
        pipelines = view_pipelines(transform, views)
        if decode == "dali" and views is not None:
            raise ArgumentError("views= needs decode='cpu': the DALI graph makes one view")
        self.pipeline = pipelines[0]
        self.buckets = check_buckets(buckets, pipelines, views, decode, self.mixing)
        sizes, extras, labels = self._read_datasets(pipelines, verify, extra_columns,
                                                    epoch_size, wanted_classes, asked_captions)
        self.classes = labels.classes
        self._check_fields(("image", "label", "index", "is_padding",
                            *((SOURCE_FIELD,) if self.mixture else ()),
                            *(CAPTION_FIELDS if self.captions else ()),
                            *(BUCKET_FIELDS if self.buckets else ()), *extras))
        placed = [place_steps(p, size, self.device.type, decode)
                  for p, size in zip(pipelines, sizes, strict=True)]
        if self.num_workers:
            for view, _ in placed:
                check_picklable(view.sample_steps)
        self.spec = ImageBatchSpec(self.path, tuple(view for view, _ in placed), seed, on_error,
                                   extras, verify, labels.maps, self.captions)
        self.view_transforms = [BatchTransforms(steps, seed, v)
                                for v, (_, steps) in enumerate(placed)]
        self.batch_transforms = self.view_transforms[0]
        self.bucketing = make_bucketing(self.buckets, self._bucket_index, self.spec, self) \
            if self.buckets else None
        self._views = views is not None
        # Copies images from the batch buffers in place (page-locked) on CUDA.
        self._feed = DeviceFeed(self.device, pin=("image", "input_ids", "attention_mask"),
                                record_stages=True)
        self._producer = self._make_producer(persistent, prefetch)
        self.skipped: list[tuple[int, str]] = []
        if drop_last and not self.buckets and self._largest_batch() < batch_size:
            # torch's DataLoader gives an empty epoch here without a word; a training loop
            # then silently trains on nothing.
            warnings.warn(f"{describe(self.path)}: drop_last=True drops every batch: this "
                          f"rank's share of an epoch is {self._largest_batch()} samples, fewer "
                          f"than batch_size={batch_size}", RuntimeWarning, stacklevel=2)

    def _read_datasets(self, pipelines: list[Pipeline], verify: str,
                       extra_columns: tuple[str, ...] | None, epoch_size: int | None,
                       classes: str | tuple[str, ...] | None,
                       captions: Captions | bool | None,
                       ) -> tuple[list[tuple[int, int]], tuple[str, ...], ClassLabels]:
        """Check the dataset (or a mixture's datasets) and take what planning needs from it:
        each view's output size, the extra columns, the class list and label maps, how
        captions are collated."""
        with open_dataset(self.path, verify=verify) as ds:
            parts = ds.sources if isinstance(ds, ConcatDataset) else [ds]
            if self.mixing:
                self.mixing.check(parts, "images", relabelled=classes is not None)
            for part in parts:
                check_image_dataset(part)
                if verify == "open":
                    part.check_hashes()  # here, before workers fork: each shard hashed once
            sizes = [largest(self.buckets) if self.buckets else output_size(ds, p)
                     for p in pipelines]
            self._bucket_index = [bucket_index(p, self.buckets) for p in parts if self.buckets]
            self.mixture: Mixture | None = None
            if self.mixing:
                counts = tuple(len(p) for p in parts)
                self.mixture = Mixture(counts, self.mixing.schedule(counts), self.batch_size,
                                       epoch_size, self.drop_last, self.seed, self.shuffle)
                self._manifest: Any = self.mixing.fingerprints(parts)
                extras = self.mixing.extra_columns(parts, extra_columns, STANDARD_COLUMNS)
            else:
                self._manifest = manifest_fingerprint(ds.manifest)
                extras = extra_column_names(ds.manifest, extra_columns, STANDARD_COLUMNS)
            self.num_samples = self.mixture.samples if self.mixture else len(ds)
            labels = resolve_classes([p.manifest for p in parts],
                                     self.path if self.mixing else [self.path], classes)
            self.captions = dataset_captions([CaptionInfo.of(p.manifest) for p in parts],
                                             [describe(p.directory) for p in parts], captions)
        return sizes, extras, labels

    def _largest_batch(self) -> int:
        """The most samples a batch of this rank can hold: batch_size, or the rank's share of
        an epoch, ceil(N / world_size), when that is less (what a resume leaves is no more)."""
        return min(self.batch_size, -(-self.num_samples // self.world_size))

    def _make_producer(self, persistent: bool, prefetch: int) -> Any:
        # Buffers for the batch that can exist, not for batch_size: 10**9 over 2,000 samples
        # is a batch of 2,000.
        largest = self._largest_batch()
        if self.decode == "dali":
            from datapipe.loader.dali_batches import DaliProducer

            return DaliProducer(self.spec, largest, self.num_workers, self.device,
                                self._feed.stream)
        make_builder = functools.partial(ImageBatchBuilder, self.spec)
        producer = self.bucketing.producer(self.num_workers, prefetch, persistent) \
            if self.bucketing else BatchProducer(make_builder, self.num_workers, prefetch,
                                                 self.spec.slot_nbytes(largest), persistent)
        h, w = self.spec.out_size
        producer.check_memory(self._passes.owner, f"a batch of {largest} images of {h}x{w}x3 "
                              f"{self.spec.pixel_dtype}", "batch_size, the crop size, "
                              "num_workers or prefetch")
        return producer

    # --- the DataLoader-like surface -----------------------------------------------------

    def _epoch_start(self, epoch: int) -> SampleRemainder | MixtureRemainder:
        if self.bucketing is not None:  # a mixture's too
            return self.bucketing.start(epoch, self.mixture)
        if self.mixture is not None:
            return self.mixture.start(epoch)
        order = KeyedOrder(self.num_samples, self.seed, epoch, self.shuffle)
        return SampleRemainder(order, self.batch_size, self.drop_last, self.shuffle)

    def _pass_batches(self) -> Iterator[dict[str, Any]]:
        epoch, start = self._begin_epoch()
        plan = self._plan(epoch)
        if start == 0:
            self.skipped = []
        host = self._host_batches(plan, epoch, start)
        for b, batch in self._feed.batches(host):
            t0 = time.perf_counter()
            stages = self._transform(batch, epoch, b)
            # "transform": the photometric ops; each BatchStep is a stage of its own.
            transform = time.perf_counter() - t0 - sum(stages.values())
            self._report(b, transform=transform, **stages, **self._feed.take_stages(b))
            self._handed_out(b, plan)
            yield batch
        self._finish_empty(start, plan)
        self._report_skips()

    def _transform(self, batch: dict[str, Any], epoch: int, b: int) -> dict[str, float]:
        """Run the batch steps, after the transfer: uint8 crosses the bus, float math runs on
        the device. Returns seconds per BatchStep by name."""
        if not self._views:
            return self._transform_view(batch, self.batch_transforms, epoch, b)
        images, labels, stages = [], [], {}
        for ops, view_images in zip(self.view_transforms, batch["image"], strict=True):
            view = {"image": view_images, "label": batch["label"]}
            for name, seconds in self._transform_view(view, ops, epoch, b).items():
                stages[name] = stages.get(name, 0.0) + seconds
            images.append(view["image"])
            labels.append(view["label"])
        batch["image"] = tuple(images)
        if any(label is not batch["label"] for label in labels):  # each view mixed its own
            batch["label"] = tuple(labels)
        return stages

    @staticmethod
    def _transform_view(batch: dict[str, Any], ops: BatchTransforms, epoch: int,
                        b: int) -> dict[str, float]:
        if not ops:
            return {}
        if not ops.has_batch_steps:
            batch["image"] = ops(batch["image"], epoch, b)
            return {}
        batch["image"], batch["label"], stages = ops.run(batch["image"], batch["label"], epoch,
                                                         b)
        return stages

    def _host_batches(self, plan: EpochPlan, epoch: int,
                      start: int) -> Iterator[tuple[int, dict[str, Any]]]:
        upcoming = functools.partial(self._upcoming, epoch + 1)
        for b, (meta, slot) in enumerate(self._producer.batches(plan, epoch, start, upcoming),
                                         start):
            t0 = time.perf_counter()
            batch = self._assemble(meta, slot)
            self._record(b, meta, {"collate": time.perf_counter() - t0,
                                   **meta.get("main_stages", {})})
            yield b, batch

    def _assemble(self, meta: dict[str, Any], slot: Any) -> dict[str, Any]:
        n, spec = meta["count"], self.bucketing.spec_of(meta) if self.bucketing else self.spec
        if slot.dim() == 4:  # DALI hands over a finished tensor
            images: Any = slot.permute(0, 3, 1, 2)
        else:
            offsets = spec.view_offsets(meta.get("capacity", n))
            images = tuple(view_of(slot, view, offset, n)
                           for view, offset in zip(spec.views, offsets, strict=True))
            images = images if self._views else images[0]
        self.skipped.extend(meta["skipped"])
        batch: dict[str, Any] = {
            "image": images,
            "label": torch.from_numpy(np.asarray(meta["label"], dtype=np.int64)),
            "index": torch.from_numpy(np.asarray(meta["index"], dtype=np.int64)),
            "is_padding": torch.from_numpy(np.asarray(meta["is_padding"], dtype=bool)),
        }
        if SOURCE_FIELD in meta:  # int64 from the workers' batch_ids
            batch[SOURCE_FIELD] = torch.from_numpy(meta[SOURCE_FIELD])
        if "caption_width" in meta:
            batch.update(caption_tensors(slot, spec.caption_offset(meta.get("capacity", n)),
                                         meta))
        add_to_batch(batch, meta["columns"])
        return batch

    def _report_skips(self) -> None:
        if self.skipped:
            warnings.warn(f"{describe(self.path)}: skipped {len(self.skipped)} samples that "
                          f"failed to decode this epoch (first: {self.skipped[0][1]}); see "
                          "loader.skipped",
                          stacklevel=3)

    def _identity(self) -> dict[str, Any]:
        return {"num_samples": self.num_samples, "batch_size": self.batch_size,
                "shuffle": self.shuffle, "seed": self.seed, "rank": self.rank,
                "world_size": self.world_size, "drop_last": self.drop_last,
                "manifest": self._manifest, **(self.mixing.identity(self.mixture.identity())
                                               if self.mixture else {}),
                **(self.bucketing.identity() if self.bucketing else {})}

    def progress(self) -> dict[str, dict[str, int]]:
        """Samples each source of a mixture gave so far, all ranks together: the epochs before
        this one whole, then this one up to the last batch handed out (also in the state dict,
        as `progress`). One dataset counts as one source."""
        if self.bucketing is not None:  # images, as the bucketed batches drew them
            return self.bucketing.progress(self._position, self.world_size, self.mixture)
        if self.mixture is not None:
            return samples_drawn(self.mixture, self._position, self.world_size,
                                 self.mixing.sources.names)
        # One dataset: what all ranks drew of this epoch is where what is left of its order
        # starts, counted without planning anything (a mixture's counts: samples_drawn).
        position = self._position
        rest = follow(self._epoch_start(position.epoch), position.segments, position.epoch)
        drawn = rest.after(self.world_size, position.batches_done).start
        return {describe(self.path): {"samples": position.epoch * self.num_samples + drawn}}

    def _source_offsets(self) -> Any:
        return None if self.mixture is None else self.mixture.offsets

    def _reweight(self, state: dict[str, Any]) -> bool:
        if self.mixture is None:
            return False
        schedule = self.mixing.reweighted(state, self.mixture.schedule, self.mixture.steps)
        if schedule is not None:
            self.mixture = dataclasses.replace(self.mixture, schedule=schedule)
            self._plans.clear()
        return schedule is not None

    def close(self) -> None:
        feed = getattr(self, "_feed", None)
        # Copies still reading batch buffers finish before they go; a forked child's copies
        # are the parent's (and CUDA does not work in it).
        if feed is not None and not self._passes.foreign:
            feed.close()
        super().close()
