"""How each image loader does the suite's job, as its own users would write it: decode,
random-resized crop to 224 (area 0.08-1, log-uniform aspect 3/4-4/3, ten tries then a centre
crop), random horizontal flip, uint8 batches N x 3 x 224 x 224, on `workers` processes (or
DALI threads). Each yields (epoch, images) for every batch of warm-up and measured epochs;
the makers of the converted forms they read (outside any timing) are here too.
"""

from __future__ import annotations

import io
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datapipe.suite.fixtures import BATCH, CROP, CROP_TRIES, PIECES, RATIO, SCALE, list_photos

if TYPE_CHECKING:
    import torch
    from PIL import Image

SHUFFLE_BUFFER = 1000


@dataclass(frozen=True)
class Job:
    """What one measured run gets, passed to the child process as JSON."""

    data: str  # the photo folder or the tool's converted form
    workers: int
    epochs: int  # measured, after the warm-up ones
    warmup: int = 1
    seed: int = 0
    batch: int = BATCH

    @property
    def total_epochs(self) -> int:
        return self.warmup + self.epochs


Batches = Iterator[tuple[int, "torch.Tensor"]]  # (epoch, uint8 N x 3 x H x W images)


# ---------------------------------------------------------------- the per-sample work (PIL)


def random_resized_box(width: int, height: int) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop.get_params, as (left, top, right, bottom)."""
    area = width * height
    log_lo, log_hi = math.log(RATIO[0]), math.log(RATIO[1])
    for _ in range(CROP_TRIES):
        target = area * random.uniform(*SCALE)
        aspect = math.exp(random.uniform(log_lo, log_hi))
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            left, top = random.randint(0, width - w), random.randint(0, height - h)
            return left, top, left + w, top + h
    return centre_box(width, height)


def centre_box(width: int, height: int) -> tuple[int, int, int, int]:
    """torchvision's fallback: the largest centred box whose aspect is within RATIO."""
    if width / height < RATIO[0]:
        w, h = width, round(width / RATIO[0])
    elif width / height > RATIO[1]:
        w, h = round(height * RATIO[1]), height
    else:
        w, h = width, height
    left, top = (width - w) // 2, (height - h) // 2
    return left, top, left + w, top + h


def crop_flip(image: Image.Image) -> torch.Tensor:
    """RandomResizedCrop(224) + RandomHorizontalFlip + PILToTensor on an RGB PIL image.

    `resize(box=...)` crops and resizes in one pass, without torchvision's intermediate crop
    copy: the baseline gets the fastest plain-PIL form. The `random` module is what DataLoader
    seeds differently in every worker."""
    import numpy as np
    import torch
    from PIL import Image

    image = image.resize((CROP, CROP), Image.Resampling.BILINEAR,
                         box=random_resized_box(*image.size))
    if random.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return torch.from_numpy(np.array(image)).permute(2, 0, 1)


def open_rgb(source: str | bytes) -> Image.Image:
    from PIL import Image

    with Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as image:
        return image.convert("RGB")


class JpegFolder:
    """ImageFolder's contract (sorted class folders -> labels) with the PIL transform above."""

    def __init__(self, root: str) -> None:
        self.items = list_photos(Path(root))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.items[index]
        return crop_flip(open_rgb(path)), label


def litdata_sample(item: dict[str, Any]) -> tuple[torch.Tensor, int]:
    return crop_flip(open_rgb(item["image"])), int(item["label"])


# ---------------------------------------------------------------- the loaders (in the child)


def epochs_of(loader: Any, job: Job) -> Batches:
    """(epoch, images) of every batch of a loader that yields (images, labels)."""
    for epoch in range(job.total_epochs):
        for images, _ in loader:
            yield epoch, images


def torch_batches(job: Job) -> Batches:
    from torch.utils.data import DataLoader

    return epochs_of(DataLoader(JpegFolder(job.data), batch_size=job.batch, shuffle=True,
                                num_workers=job.workers, persistent_workers=True), job)


def dali_pipeline(job: Job) -> Any:
    from nvidia.dali import Pipeline, fn, types

    pipe = Pipeline(batch_size=job.batch, num_threads=job.workers, device_id=None, seed=job.seed)
    with pipe:
        # pad_last_batch: an epoch ends on a batch boundary (the tail is padded with copies of
        # the last sample, which we drop), so every epoch is exactly the folder.
        jpegs, _ = fn.readers.file(file_root=job.data, random_shuffle=True, pad_last_batch=True,
                                   name="reader")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                               random_area=list(SCALE),
                                               random_aspect_ratio=list(RATIO),
                                               num_attempts=CROP_TRIES)
        images = fn.resize(images, resize_x=CROP, resize_y=CROP,
                           interp_type=types.INTERP_LINEAR, antialias=True)
        pipe.set_outputs(fn.flip(images, horizontal=fn.random.coin_flip()))
    pipe.build()
    return pipe


def dali_batches(job: Job) -> Batches:
    import numpy as np
    import torch

    pipe = dali_pipeline(job)
    per_epoch = pipe.epoch_size("reader")
    for epoch in range(job.total_epochs):
        for start in range(0, per_epoch, job.batch):
            (images,) = pipe.run()
            # np.array copies: DALI reuses its output buffers on the next run.
            array = np.array(images.as_tensor())[: per_epoch - start]
            yield epoch, torch.from_numpy(array).permute(0, 3, 1, 2)


def webdataset_batches(job: Job) -> Batches:
    import webdataset as wds

    urls = sorted(str(p) for p in Path(job.data).glob("*.tar"))
    dataset = (wds.WebDataset(urls, shardshuffle=len(urls), seed=job.seed)
               .shuffle(SHUFFLE_BUFFER).decode("pil").to_tuple("jpg", "cls")
               .map_tuple(crop_flip, int).batched(job.batch))
    return epochs_of(wds.WebLoader(dataset, batch_size=None, num_workers=job.workers,
                                   persistent_workers=True), job)


def litdata_batches(job: Job) -> Batches:
    from litdata import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(job.data, shuffle=True, seed=job.seed, transform=litdata_sample)
    return epochs_of(StreamingDataLoader(dataset, batch_size=job.batch, num_workers=job.workers,
                                         persistent_workers=True), job)


def datapipe_batches(job: Job, decode: str, **mixing: Any) -> Batches:
    """datapipe's Loader; with `weights=` in `mixing`, a mixture of the datasets job.data
    names (the mixture group)."""
    import datapipe as dp

    transform = dp.image.RandomResizedCrop(CROP) | dp.image.HorizontalFlip()
    with dp.Loader(job.data, batch_size=job.batch, shuffle=True, seed=job.seed,
                   num_workers=job.workers, decode=decode, transform=transform,
                   **mixing) as loader:
        for epoch in range(job.total_epochs):
            for batch in loader:
                yield epoch, batch["image"]


# ---------------------------------------------------------------- converted forms


def reencode(item: tuple[str, int]) -> tuple[bytes, int]:
    """One photo as datapipe stores it (same resize and JPEG settings, hence the same bytes)."""
    from preprocess.image_ops import ImageSettings, prepare_image

    path, label = item
    payload, _, _ = prepare_image(Path(path).read_bytes(), ImageSettings())
    return payload, label


def litdata_item(item: tuple[str, int]) -> dict[str, Any]:
    payload, label = reencode(item)
    return {"image": payload, "label": label}


def make_webdataset(src: Path, out: Path, workers: int) -> None:
    import multiprocessing

    import webdataset as wds

    items = list_photos(src)
    out.mkdir(parents=True)
    with wds.ShardWriter(str(out / "shard-%06d.tar"), maxcount=math.ceil(len(items) / PIECES),
                         verbose=0) as sink, multiprocessing.Pool(workers) as pool:
        for index, (payload, label) in enumerate(pool.imap(reencode, items, chunksize=16)):
            sink.write({"__key__": f"{index:08d}", "jpg": payload, "cls": label})


def make_litdata(src: Path, out: Path, workers: int) -> None:
    import litdata

    items = list_photos(src)
    litdata.optimize(fn=litdata_item, inputs=items, output_dir=str(out), num_workers=workers,
                     chunk_size=math.ceil(len(items) / PIECES), verbose=False)
