#!/usr/bin/env python3
"""Build a small converted sample (images and tokens) for the examples, in a few seconds:

    OUT/images   photo-like JPEGs in --classes classes, converted by `datapipe convert images`
    OUT/tokens   an English-like corpus, tokenized by `datapipe convert text` (byte tokenizer)

The photos are the procedural ones of tools/make_photos.py (no download), small enough that an
epoch trains on a CPU in seconds. Same arguments, same datasets. Needs only numpy, PIL and
datapipe. From the repository root: `python -m tools.make_sample_data OUT` (`--help`).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np

from datapipe.cli import main as datapipe_cli
from datapipe.suite.photo_sources import procedural_photo
from tools.make_text import make_text

PHOTO_SIZES = ((72, 56), (64, 64), (56, 72), (80, 60))  # a few shapes, as photos come


def make_photo_folder(out: Path, images: int, classes: int, seed: int) -> Path:
    """out/class_K/photo_N.jpg: `images` procedural photos spread over `classes` folders."""
    for i in range(images):
        label = i % classes
        folder = out / f"class_{label:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        width, height = PHOTO_SIZES[i % len(PHOTO_SIZES)]
        photo = procedural_photo(np.random.default_rng([seed, i]), width, height)
        photo.save(folder / f"photo_{i:05d}.jpg", quality=90)
    return out


def convert(*args: object) -> None:
    try:
        datapipe_cli(["convert", *map(str, args)])
    except SystemExit as exc:
        if exc.code:
            raise


def make_sample_data(out: Path, images: int = 256, classes: int = 4, documents: int = 400,
                     seed: int = 0) -> Path:
    """Write OUT/images and OUT/tokens (replacing earlier ones); returns OUT."""
    out.mkdir(parents=True, exist_ok=True)
    photos = out / "photos"
    shutil.rmtree(photos, ignore_errors=True)
    make_photo_folder(photos, images, classes, seed)
    convert("images", photos, out / "images", "--short-side", "48", "--shard-size", "256KB",
            "--workers", "1", "--overwrite")
    shutil.rmtree(photos)
    corpus = make_text(out / "corpus.txt", documents, seed)
    convert("text", corpus, out / "tokens", "--tokenizer", "bytes", "--append-eos",
            "--shard-size", "256KB", "--workers", "1", "--overwrite")
    corpus.unlink()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--documents", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in ("images", "classes", "documents"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.seed < 0:
        parser.error(f"--seed must be >= 0, got {args.seed}")
    make_sample_data(args.out, args.images, args.classes, args.documents, args.seed)
    print(f"wrote {args.out / 'images'} ({args.images} photos) and {args.out / 'tokens'} "
          f"({args.documents} documents)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
