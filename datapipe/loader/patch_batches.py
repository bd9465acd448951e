"""Builds one patch batch in a worker: each image's target grid from its stored size, then its
patches decoded, normalised and laid out straight into the shared-memory batch buffer.

A buffer holds, for `capacity` patch rows: pixel_values (capacity, patch_dim) float32, then
each row's (row, column) in its image's grid (int64), then (padded layout) each row's validity
(int32). Packed: the images' patches back to back; padded: image j's at rows j x P .. on, the
rest of its P rows zero, as the processor pads. The few per-image numbers (grids, offsets,
labels) travel beside it as metadata.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.errors import ArgumentError, DataError
from datapipe.format.concat import Locations, batch_ids, open_dataset, sample_where
from datapipe.format.sources import Location
from datapipe.image.patch_geometry import TargetMemo
from datapipe.image.patch_producer import PatchProducer, PatchSpec
from datapipe.image.patch_steps import PatchSteps
from datapipe.image.sample_random import SampleGenerators
from datapipe.image.transforms import Transform
from datapipe.image.worker_steps import StepFailed
from datapipe.loader.class_labels import BatchLabels
from datapipe.loader.extra_columns import ExtraColumns
from datapipe.loader.workers import BatchTask, worker_timing

PATCH_LAYOUTS = ("packed", "padded")
ON_ERROR = ("raise", "skip")


@dataclass(frozen=True)
class PatchBatchSpec:
    """Everything a worker needs to build patch batches (small and picklable)."""

    directory: str | Location | Locations  # a mixture's: its sources, read as one
    patches: PatchSpec
    layout: str  # "packed" or "padded"
    capacity: int  # patch rows a buffer holds
    row_patches: int  # padded: rows per image (P); packed: unused (0)
    seed: int
    flip: bool = False
    on_error: str = "raise"
    extra_columns: tuple[str, ...] = ()
    verify: str = "cheap"
    label_maps: tuple[tuple[int, ...], ...] | None = None  # classes=: each source's renumbering
    steps: tuple[Transform, ...] = ()  # per-image augmentation (image/patch_steps.py)

    def __post_init__(self) -> None:
        if self.on_error not in ON_ERROR:
            raise ArgumentError(f"on_error must be one of {ON_ERROR}, got {self.on_error!r}")

    def slot_nbytes(self) -> int:
        mask = 4 if self.layout == "padded" else 0
        return self.capacity * (self.patches.patch_dim * 4 + 16 + mask)

    def regions(self, out: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """A buffer's (pixel_values, patch positions, validity mask or None) views."""
        n, dim = self.capacity, self.patches.patch_dim
        pixels_end = n * dim * 4
        pixels = out[:pixels_end].view(np.float32).reshape(n, dim)
        positions = out[pixels_end:pixels_end + n * 16].view(np.int64).reshape(n, 2)
        mask = (out[pixels_end + n * 16:pixels_end + n * 20].view(np.int32)
                if self.layout == "padded" else None)
        return pixels, positions, mask


def flips(seeds: SampleGenerators, epoch: int, indices: np.ndarray) -> list[bool]:
    """Whether each image is mirrored: a pure function of (seed, epoch, index), so a rerun
    and a resume at any world size mirror the same images."""
    return [bool(seeds.seed_for(epoch, i, 0, 0) & 1) for i in indices.tolist()]


class PatchBatchBuilder:
    def __init__(self, spec: PatchBatchSpec) -> None:
        self.spec = spec
        self.dataset = open_dataset(spec.directory, verify=spec.verify)
        self.encoding = self.dataset.manifest.settings.get("encoding", "jpeg")
        self.heights = self.dataset.scalar_map("height")
        self.widths = self.dataset.scalar_map("width")
        self.labels = BatchLabels(self.dataset, spec.label_maps)
        self.extras = ExtraColumns(self.dataset, spec.extra_columns)
        self.producer = PatchProducer(spec.patches)
        self.targets = TargetMemo(spec.patches.geometry)
        self.seeds = SampleGenerators(spec.seed)
        self.steps = PatchSteps(spec.steps, spec.seed)

    def build(self, task: BatchTask, out: np.ndarray) -> dict[str, Any]:
        started = time.perf_counter()
        idx = task.indices
        shards, rows = self.dataset.locate_many(idx)
        pixels, positions, mask = self.spec.regions(out)
        targets = self.targets.target_sizes(self.heights[idx], self.widths[idx])
        kept, skipped, read_s = self._fill(task, shards, rows, targets, pixels, positions)
        keep = np.asarray(kept, dtype=np.int64)
        p = self.spec.patches.geometry.patch_size
        grids = np.stack([targets[0][keep] // p, targets[1][keep] // p], axis=1).astype(np.int64)
        counts = grids[:, 0] * grids[:, 1]
        if mask is not None:
            self._pad(pixels, positions, mask, counts)
        ended = time.perf_counter()
        return {"count": len(kept), "grids": grids, "patches": int(counts.sum()),
                "cu_seqlens": np.concatenate([[0], np.cumsum(counts)]).astype(np.int32),
                "max_seqlen": int(counts.max()) if len(counts) else 0,
                **batch_ids(self.dataset, idx[keep], shards[keep]),
                "label": self.labels[idx[keep]], "is_padding": task.is_pad[keep],
                "skipped": skipped, "columns": self.extras.of(idx[keep]),
                "timing": worker_timing(started, ended, self._stages(ended - started, read_s))}

    def _stages(self, seconds: float, read_s: float) -> dict[str, float]:
        """Seconds per stage: reading, each augmentation step by its name, decoding (and
        laying out patches) the rest."""
        steps = self.steps.take_seconds()
        return {"read": read_s, **steps, "decode": seconds - read_s - sum(steps.values())}

    def _fill(self, task: BatchTask, shards: np.ndarray, rows: np.ndarray,
              targets: tuple[np.ndarray, np.ndarray], pixels: np.ndarray,
              positions: np.ndarray) -> tuple[list[int], list[tuple[int, str]], float]:
        """Each image's patches and their positions into place: (the batch places of those
        made, the images skipped and why, seconds reading)."""
        idx = task.indices
        # Python ints once a batch: NumPy scalar arithmetic per image cost more than the rest
        # of this loop's own work.
        heights, widths = self.heights[idx].tolist(), self.widths[idx].tolist()
        th, tw = targets[0].tolist(), targets[1].tolist()
        shard_of, row_of = shards.tolist(), rows.tolist()
        p = self.spec.patches.geometry.patch_size
        mirrored = flips(self.seeds, task.epoch, idx) if self.spec.flip else [False] * len(idx)
        kept: list[int] = []
        skipped: list[tuple[int, str]] = []
        pos, read_s = 0, 0.0
        for j, index in enumerate(idx.tolist()):
            t0 = time.perf_counter()
            shard = self.dataset.shard(shard_of[j])
            data = shard.payload("image", row_of[j])  # a view of the shard: no copy
            read_s += time.perf_counter() - t0
            rows_j, cols_j = th[j] // p, tw[j] // p
            n = rows_j * cols_j
            at = pos if self.spec.layout == "packed" else len(kept) * self.spec.row_patches
            steps = functools.partial(self.steps.run, epoch=task.epoch, index=index) \
                if self.steps else None
            try:
                self.producer.produce(data, self.encoding, (heights[j], widths[j]),
                                      (th[j], tw[j]), mirrored[j], pixels[at:at + n], steps)
            except ArgumentError:
                raise  # a step's wrong output: the step's fault, not the sample's
            except Exception as exc:  # untrusted bytes or the user's step: names the sample
                what = exc if isinstance(exc, StepFailed) else \
                    f"cannot decode: {type(exc).__name__}: {exc}"
                reason = f"{sample_where(self.dataset, shard, row_of[j], index)}: {what}"
                if self.spec.on_error == "raise":
                    raise DataError(reason + " (pass on_error='skip' to skip such samples)") \
                        from exc
                skipped.append((index, reason))
                continue
            positions[at:at + n] = self.producer.coordinates(rows_j, cols_j)
            kept.append(j)
            pos = at + n
        return kept, skipped, read_s

    def _pad(self, pixels: np.ndarray, positions: np.ndarray, mask: np.ndarray,
             counts: np.ndarray) -> None:
        """Padded layout: each image's rows past its patches zeroed (the buffer is reused), as
        the processor pads, and the validity mask set."""
        size = self.spec.row_patches
        for j, n in enumerate(counts.tolist()):
            lo = j * size
            pixels[lo + n:lo + size] = 0
            positions[lo + n:lo + size] = 0
            mask[lo:lo + n], mask[lo + n:lo + size] = 1, 0
