"""How each loader does the buckets job (SDXL-style aspect-ratio buckets), as its own users
would write it: the suite's photos at their own size and aspect (re-encoded as `datapipe
convert images --short-side 0` stores them), kohya's buckets of about 1024² pixels (steps of
64, sides 512-2048), each image resized to cover its bucket and cut to it at random, flipped
at random, uint8 batches of BATCH images of one bucket with SDXL's size conditioning
(`original_size`, `crop_top_left`, `target_size`), on `workers` processes.

The torch peer does what kohya sd-scripts does around a torch DataLoader, in plain PIL:
image sizes read from the files' headers once, each image put in a bucket, a batch sampler
that shuffles each bucket and cuts it into batches (the last one filled with the bucket's
beginning, as datapipe fills it), the batches in a shuffled order; PIL decode and one
crop-and-resize pass per sample in the workers. It assigns the buckets with the same
`Buckets` object, so both make the same batch shapes. datapipe's fixed-size job, the
yardstick of the bucketed one, decodes the same shards to a centred square resized to
1024 x 1024 (`CenterCrop(1024, fraction=1.0)`: the image resized to cover the square, as a
bucket is covered) + flip."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from datapipe.suite.fixtures import list_photos
from datapipe.suite.groups.image_peers import Batches, Job, open_rgb

if TYPE_CHECKING:
    import torch
    from PIL import Image

    from datapipe.image.buckets import Buckets

AREA, STEP, MIN_SIDE, MAX_SIDE = 1024 ** 2, 64, 512, 2048
FIXED = 1024  # the fixed-size job's side: the same output area
BATCH = 8
FIELDS = ("original_size", "crop_top_left", "target_size")


def kohya_buckets() -> Buckets:
    import datapipe as dp

    return dp.image.Buckets.kohya(area=AREA, step=STEP, min_side=MIN_SIDE, max_side=MAX_SIDE)


# ---------------------------------------------------------------- the data


def _stored_at_own_size(item: tuple[int, tuple[str, int]]) -> None:
    """One photo re-encoded as `convert images --short-side 0` stores it, written to its place
    in the tree (path and label given)."""
    from preprocess.image_ops import ImageSettings, prepare_image

    _, (path, target) = item
    payload, _, _ = prepare_image(Path(path).read_bytes(), ImageSettings(short_side=0))
    Path(target).write_bytes(payload)


def make_aspect_jpegs(src: Path, out: Path, workers: int) -> None:
    """The photos as an ImageFolder tree of JPEGs at their own size: the bytes datapipe's
    shards of them hold."""
    import multiprocessing

    jobs = []
    for index, (path, _) in enumerate(list_photos(src)):
        target = out / Path(path).parent.name / Path(path).name
        target.parent.mkdir(parents=True, exist_ok=True)
        jobs.append((index, (path, str(target))))
    with multiprocessing.Pool(workers) as pool:
        for _ in pool.imap_unordered(_stored_at_own_size, jobs, chunksize=16):
            pass


def make_aspect_datapipe(src: Path, out: Path, workers: int) -> None:
    """`datapipe convert images --short-side 0`, as a user converts photos for buckets."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "datapipe.cli", "convert", "images", str(src),
                    str(out), "--workers", str(workers), "--short-side", "0"], check=True)


# ---------------------------------------------------------------- the torch peer


def cover_crop_flip(image: Image.Image, size: tuple[int, int]) -> tuple[torch.Tensor, int, int]:
    """The image resized to cover `size` (H, W), cut to it at random and flipped at random:
    (CHW uint8 tensor, top, left), left counted from the flipped image's edge as SDXL
    trainers record it. One PIL pass: `resize(box=...)` crops and resizes at once."""
    import torch
    from PIL import Image

    out_h, out_w = size
    w, h = image.size
    scale = max(out_h / h, out_w / w)
    resized_w, resized_h = max(out_w, round(w * scale)), max(out_h, round(h * scale))
    top, left = random.randint(0, resized_h - out_h), random.randint(0, resized_w - out_w)
    box = (left / scale, top / scale, min(w, (left + out_w) / scale),
           min(h, (top + out_h) / scale))
    image = image.resize((out_w, out_h), Image.Resampling.BILINEAR, box=box)
    if random.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        left = resized_w - left - out_w
    return torch.from_numpy(np.array(image)).permute(2, 0, 1), top, left


class BucketedFolder:
    """A map-style dataset of an ImageFolder tree whose every image knows its bucket: sizes
    read from the headers once (as kohya caches them), assigned by the same Buckets."""

    def __init__(self, root: str, buckets: Buckets) -> None:
        from PIL import Image

        self.items = list_photos(Path(root))
        sizes = []
        for path, _ in self.items:
            with Image.open(path) as image:
                sizes.append((image.height, image.width))
        self.heights, self.widths = (np.array(side, np.int64) for side in zip(*sizes, strict=True))
        self.bucket, _ = buckets.assign(self.heights, self.widths)
        self.sizes = buckets.sizes

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        import torch

        path, label = self.items[index]
        target = self.sizes[self.bucket[index]]
        image, top, left = cover_crop_flip(open_rgb(path), target)
        return {"image": image, "label": label,
                "original_size": torch.tensor([self.heights[index], self.widths[index]]),
                "crop_top_left": torch.tensor([top, left]),
                "target_size": torch.tensor(target)}


class BucketBatchSampler:
    """Each epoch: every bucket's images shuffled and cut into batches of `batch` (the last
    one filled with the bucket's beginning), all batches in a shuffled order."""

    def __init__(self, bucket: np.ndarray, batch: int, seed: int) -> None:
        self.members = [np.flatnonzero(bucket == k) for k in np.unique(bucket)]
        self.batch, self.seed, self.epoch = batch, seed, 0

    def __len__(self) -> int:
        return sum(-(-len(m) // self.batch) for m in self.members)

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng((self.seed, self.epoch))
        self.epoch += 1
        batches = []
        for members in self.members:
            ids = rng.permutation(members)
            ids = np.resize(ids, -(-len(ids) // self.batch) * self.batch)  # fill: repeats
            batches += [ids[i:i + self.batch].tolist() for i in range(0, len(ids), self.batch)]
        for k in rng.permutation(len(batches)):
            yield batches[k]


def checked(batch: dict[str, Any], sizes: tuple[tuple[int, int], ...]) -> Any:
    """A batch's images, once its fields are shown to be the job's: one bucket's size, and
    (B, 2) int64 size conditioning matching it."""
    import torch

    images = batch["image"]
    size = tuple(images.shape[2:])
    if size not in sizes:
        raise RuntimeError(f"image batch {tuple(images.shape)}: {size} is no bucket's size")
    for name in FIELDS:
        value = batch[name]
        if tuple(value.shape) != (len(images), 2) or value.dtype != torch.int64:
            raise RuntimeError(f"{name} is {tuple(value.shape)} {value.dtype}, expected "
                               f"({len(images)}, 2) torch.int64")
    if not (batch["target_size"] == torch.tensor(size)).all():
        raise RuntimeError(f"target_size {batch['target_size'][0].tolist()} for images of {size}")
    return images


def torch_bucket_batches(job: Job) -> Batches:
    from torch.utils.data import DataLoader

    buckets = kohya_buckets()
    dataset = BucketedFolder(job.data, buckets)
    sampler = BucketBatchSampler(dataset.bucket, job.batch, job.seed)
    loader = DataLoader(dataset, batch_sampler=sampler, num_workers=job.workers,
                        persistent_workers=True)
    for epoch in range(job.total_epochs):
        for n, batch in enumerate(loader):
            yield epoch, checked(batch, buckets.sizes) if n == 0 else batch["image"]


# ---------------------------------------------------------------- datapipe


def datapipe_bucket_batches(job: Job) -> Batches:
    """datapipe's Loader with the kohya buckets and a flip."""
    import datapipe as dp

    buckets = kohya_buckets()
    with dp.Loader(job.data, batch_size=job.batch, shuffle=True, seed=job.seed,
                   num_workers=job.workers, buckets=buckets,
                   transform=dp.image.HorizontalFlip()) as loader:
        for epoch in range(job.total_epochs):
            for n, batch in enumerate(loader):
                yield epoch, checked(batch, buckets.sizes) if n == 0 else batch["image"]


def datapipe_fixed_batches(job: Job) -> Batches:
    """datapipe's fixed-size job at the same area: each image resized to cover 1024 x 1024
    and cut to it (centred) + flip."""
    import datapipe as dp

    transform = dp.image.CenterCrop(FIXED, fraction=1.0) | dp.image.HorizontalFlip()
    with dp.Loader(job.data, batch_size=job.batch, shuffle=True, seed=job.seed,
                   num_workers=job.workers, transform=transform) as loader:
        for epoch in range(job.total_epochs):
            for batch in loader:
                yield epoch, batch["image"]
