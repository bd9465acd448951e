"""FFCV's side of the images group, run by its path under FFCV's own venv (see
datapipe/suite/groups/ffcv.py); it imports FFCV, torch and PIL, never datapipe.

    python ffcv_run.py --write SRC OUT.beton WORKERS   write the .beton of an ImageFolder
    python ffcv_run.py --one JOB RESULT                measure one run, as every image peer

The load: FFCV's Loader in random order over the page-cached file, its fused decode +
random-resized crop, random horizontal flip, then uint8 torch batches N x 3 x CROP x CROP.
FFCV's workers are threads of one process (a numba-compiled pipeline); each fresh process
compiles the pipeline again, which its start-up time includes.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

BETON = "data.beton"
MAX_RESOLUTION = 341
JPEG_QUALITY = 90
MODULES = ("torch", "ffcv.loader")  # imported before the clock starts, as the other peers'


class PhotoFolder:
    """An ImageFolder as FFCV's DatasetWriter reads an indexed dataset: (RGB image, label)."""

    def __init__(self, src: Path) -> None:
        classes = sorted(p for p in src.iterdir() if p.is_dir())
        self.items = [(f, label) for label, d in enumerate(classes) for f in sorted(d.iterdir())]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        from PIL import Image

        path, label = self.items[index]
        try:
            with Image.open(path) as image:
                return image.convert("RGB"), label
        except Exception as exc:
            # FFCV's writer waits forever for a worker process that died: name the photo and
            # end the writer with all its workers (make_beton made them a process group).
            print(f"{path}: cannot read this photo ({type(exc).__name__}: {exc})",
                  file=sys.stderr, flush=True)
            os.killpg(os.getpgrp(), signal.SIGKILL)
            raise  # not reached


def write_beton(src: Path, path: Path, workers: int) -> None:
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter

    if os.getpgrp() != os.getpid():  # not run by make_beton: PhotoFolder's kill stays in here
        os.setpgrp()
    fields = {"image": RGBImageField(write_mode="jpg", max_resolution=MAX_RESOLUTION,
                                     jpeg_quality=JPEG_QUALITY),
              "label": IntField()}
    DatasetWriter(str(path), fields, num_workers=workers).from_indexed_dataset(
        PhotoFolder(src))


def ffcv_batches(job: Any) -> Any:
    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import RandomHorizontalFlip, ToTensor, ToTorchImage

    decode = RandomResizedCropRGBImageDecoder((job.crop, job.crop), scale=tuple(job.scale),
                                              ratio=tuple(job.ratio))
    pipelines = {"image": [decode, RandomHorizontalFlip(), ToTensor(), ToTorchImage()],
                 "label": [IntDecoder(), ToTensor()]}
    loader = Loader(str(Path(job.data) / BETON), batch_size=job.batch, num_workers=job.workers,
                    order=OrderOption.RANDOM, os_cache=True, drop_last=False, seed=job.seed,
                    pipelines=pipelines)
    for epoch in range(job.total_epochs):
        for images, _ in loader:
            yield epoch, images


def main(argv: list[str]) -> int:
    from clock import measure_one  # beside this file, which is run by its path

    if argv[:1] == ["--write"] and len(argv) == 4:
        write_beton(Path(argv[1]), Path(argv[2]), int(argv[3]))
    elif argv[:1] == ["--one"] and len(argv) == 3:
        measure_one(argv[1], Path(argv[2]), MODULES, ffcv_batches)
    else:
        print("usage: ffcv_run.py --write SRC BETON WORKERS | --one JOB RESULT", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
