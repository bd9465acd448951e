"""The patches group's runs: datapipe's PatchLoader, and a torch DataLoader whose workers run
transformers' image processor on PIL-decoded photos (how trainers make these batches today).

Each run is a fresh process: `warmup` epochs, then `epochs` measured ones, clocked from the
warm-up's last batch to the last batch (as the image group clocks). A run records images/s,
images per CPU-second of its process tree, and for datapipe the patch efficiency (real
patches / budget) of every batch but each epoch's last.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datapipe.suite.isolated.clock import TreeCPU

# Batches of the two models, as the job gives them: Qwen2-VL's processor defaults
# (min 56 x 56, max 28 x 28 x 1280 pixels: under 1024^2) under a budget of 16,384 patches;
# SigLIP2 NaFlex at 256 patches an image.
QWEN_MAX_PATCHES = 16384
SIGLIP_BATCH = 32
QWEN_TORCH_BATCH = 12  # images a torch batch: about what a 16,384-patch budget holds here


@dataclass(frozen=True)
class PatchJob:
    data: str  # the photo folder (torch) or the dataset converted at its own size (datapipe)
    model: str  # "qwen2_vl" or "siglip2"
    workers: int
    warmup: int
    epochs: int


# One batch as a run counts it: (epoch, images, real patches, patches budgeted).
Counted = tuple[int, int, int, int]


def datapipe_batches(job: PatchJob) -> Iterator[Counted]:
    import datapipe

    size = ({"max_patches": QWEN_MAX_PATCHES} if job.model == "qwen2_vl"
            else {"batch_size": SIGLIP_BATCH})
    with datapipe.PatchLoader(job.data, job.model, num_workers=job.workers, **size) as loader:
        for epoch in range(job.warmup + job.epochs):
            loader.set_epoch(epoch)
            for batch in loader:
                real = batch["num_patches"]
                yield (epoch, len(batch["index"]), real,
                       round(real / batch["efficiency"]) if batch["efficiency"] else 0)


class PhotoFiles:
    """The photo folder's files, decoded with PIL in the DataLoader's workers."""

    def __init__(self, folder: str) -> None:
        self.files = sorted(Path(folder).rglob("*.jpg"))

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> Any:
        from PIL import Image

        with Image.open(self.files[i]) as image:
            return image.convert("RGB")


class ProcessorCollate:
    """The model's image processor over a batch of PIL images, in the worker."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.processor: Any = None

    def __call__(self, images: list[Any]) -> Any:
        if self.processor is None:
            from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
                Qwen2VLImageProcessorPil,
            )
            from transformers.models.siglip2.image_processing_pil_siglip2 import (
                Siglip2ImageProcessorPil,
            )

            self.processor = (Qwen2VLImageProcessorPil() if self.model == "qwen2_vl"
                              else Siglip2ImageProcessorPil())
        return dict(self.processor(images, return_tensors="pt"))


def torch_batches(job: PatchJob) -> Iterator[Counted]:
    import torch

    files = PhotoFiles(job.data)
    loader = torch.utils.data.DataLoader(
        files, batch_size=QWEN_TORCH_BATCH if job.model == "qwen2_vl" else SIGLIP_BATCH,
        shuffle=True, num_workers=job.workers, collate_fn=ProcessorCollate(job.model),
        persistent_workers=job.workers > 0)
    for epoch in range(job.warmup + job.epochs):
        for batch in loader:
            if job.model == "qwen2_vl":
                grids = batch["image_grid_thw"]
                yield epoch, len(grids), int(batch["pixel_values"].shape[0]), 0
            else:
                yield epoch, len(batch["spatial_shapes"]), \
                    int(batch["pixel_attention_mask"].sum()), batch["pixel_values"].shape[0] * \
                    batch["pixel_values"].shape[1]


def measure(batches: Iterator[Counted], job: PatchJob) -> dict[str, Any]:
    """Images/s and images per CPU-second after the warm-up; patch efficiency over full
    batches (each epoch's last left out: what is left over, not what the packer made)."""
    started = time.perf_counter()
    counted = list(_arrivals(batches))
    start = max(0, next(i for i, c in enumerate(counted) if c[0][0] >= job.warmup) - 1)
    measured = sum(c[0][1] for c in counted[start + 1:])
    seconds = counted[-1][1] - counted[start][1]
    cpu = counted[-1][2] - counted[start][2]
    last_of_epoch = {max(i for i, c in enumerate(counted) if c[0][0] == e)
                     for e in {c[0][0] for c in counted}}
    full = [c[0] for i, c in enumerate(counted) if i not in last_of_epoch and c[0][3]]
    real, budget = sum(c[2] for c in full), sum(c[3] for c in full)
    return {"images": measured, "seconds": seconds,
            "rate": measured / seconds if seconds > 0 else 0.0,
            "cpu_rate": measured / cpu if cpu > 0 else 0.0,
            "efficiency": real / budget if budget else None,
            "patches_per_image": sum(c[0][2] for c in counted) / max(1, sum(
                c[0][1] for c in counted)),
            "start_s": counted[0][1] - started}


def _arrivals(batches: Iterator[Counted]) -> Iterator[tuple[Counted, float, float]]:
    cpu_clock, epoch = TreeCPU(), None
    for counted in batches:
        yield counted, time.perf_counter(), cpu_clock.seconds(rescan=counted[0] != epoch)
        epoch = counted[0]


def measure_datapipe(job: PatchJob) -> dict[str, Any]:
    return measure(datapipe_batches(job), job)


def measure_torch(job: PatchJob) -> dict[str, Any]:
    return measure(torch_batches(job), job)
