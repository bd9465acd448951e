"""FFCV as a peer of benchmarks/bench_loader.py, run in a venv of its own.

To install the FFCV peer, run `bash tools/setup_ffcv.sh` once (Debian, as root: it installs
FFCV's system libraries with apt-get and makes .venv-ffcv); without it the loader benchmark
reports ffcv as "not installed".

FFCV wants plain pillow (our .venv has pillow-simd, which shares the PIL package) and builds
C code against libjpeg-turbo and OpenCV, so it lives in .venv-ffcv at the repo root and its
runs are children under .venv-ffcv/bin/python, PYTHONPATH at the repo root. The child side of
this module imports FFCV, torch, PIL and the benchmarks' own helpers, never datapipe (not
installed there).

The form: a .beton written by FFCV's DatasetWriter from the same photos, each image
re-encoded by FFCV as JPEG q90 with its longer side at most 341 px (the other converted forms'
shorter side 256, for 4:3 photos), and its label as an IntField. Like the other forms it is
made once, outside any timing, and cached until the photo set changes.

The load: FFCV's Loader in random order over the page-cached file, batches of 256 with the
last one kept, its fused decode + random-resized crop to 224 (area 0.08-1, log-uniform aspect
3/4-4/3), random horizontal flip, then uint8 torch batches N x 3 x 224 x 224. FFCV's workers
are threads of one process (a numba-compiled pipeline), not processes; each fresh process
compiles the pipeline again, which its start-up time includes.

    .venv-ffcv/bin/python -m benchmarks.ffcv_peer --write SRC OUT.beton WORKERS   # internal
    .venv-ffcv/bin/python -m benchmarks.ffcv_peer --one --job JSON --result FILE  # internal
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Collection
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import REPO, run_child, timed
from benchmarks.fixtures import CROP, RATIO, SCALE, list_photos
from benchmarks.runs import Outcome, Record, initial_outcome, write_child_result

if TYPE_CHECKING:
    from benchmarks.bench_loader import Batches, Job

VENV = REPO / ".venv-ffcv"
SETUP_MARKER = ".ffcv-setup-2"  # written last by tools/setup_ffcv.sh
SETUP_HINT = "run bash tools/setup_ffcv.sh"
BETON = "data.beton"
MAX_RESOLUTION = 341
JPEG_QUALITY = 90
FORM_LABEL = f"FFCV .beton (its JPEG q{JPEG_QUALITY}, longer side <= {MAX_RESOLUTION})"
# The .beton of a few thousand photos takes a minute or two; a writer still busy after this is
# stuck (FFCV's waits on its workers have no timeout of their own).
WRITE_TIMEOUT_S = 600
MODULES = ("torch", "ffcv.loader")  # imported before the clock starts, as the other peers'


# ---------------------------------------------------------------- the parent's side


def venv_python() -> Path:
    return VENV / "bin" / "python"


def ready() -> bool:
    """True once tools/setup_ffcv.sh has finished making the venv."""
    return (VENV / SETUP_MARKER).exists() and venv_python().exists()


def version() -> str | None:
    """FFCV's version in its venv (the main environment has none), from package metadata."""
    from importlib import metadata

    for site in VENV.glob("lib/python*/site-packages"):
        found = next(iter(metadata.distributions(name="ffcv", path=[str(site)])), None)
        if found is not None:
            return found.version
    return None


def initial(skip: Collection[str]) -> Outcome:
    """The peer's outcome before any run: skipped, not installed (with how to), or ok."""
    return initial_outcome(("ffcv",), skip, (SETUP_HINT,), absent=lambda _: not ready())


def child_env() -> dict[str, str]:
    # The repo's `benchmarks` package, and nothing from the calling venv's path.
    return {"PYTHONPATH": str(REPO)}


def run_one(job: Job, run_dir: Path) -> Record:
    """Measure one run in a fresh .venv-ffcv process (see common.run_child)."""
    argv = ["-m", "benchmarks.ffcv_peer", "--one", "--job", json.dumps(asdict(job)),
            "--result", str(run_dir / "result.json")]
    return run_child(argv, run_dir / "result.json", run_dir / "log.txt", child_env(),
                     python=str(venv_python()))


def make_beton(src: Path, out: Path, workers: int) -> None:
    """bench_loader's maker of the "ffcv" form: `out` (absent when this starts) holding the
    .beton, written by FFCV's own DatasetWriter in the ffcv venv. If the writer fails (an
    unreadable photo, say) or is still busy after WRITE_TIMEOUT_S, raises RuntimeError with
    its last word; none of its processes is left either way."""
    out.mkdir(parents=True)
    argv = [str(venv_python()), "-m", "benchmarks.ffcv_peer", "--write", str(src),
            str(out / BETON), str(workers)]
    # A session of its own: the writer and its worker processes form one process group, which
    # a failing worker ends (PhotoFolder) and which is ended here whatever happened.
    with subprocess.Popen(argv, env={**child_env(), "TQDM_DISABLE": "1"},
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as proc:
        try:
            errors = proc.communicate(timeout=WRITE_TIMEOUT_S)[1]
        except subprocess.TimeoutExpired:
            errors = f"still busy after {WRITE_TIMEOUT_S} s"
        finally:
            end_group(proc.pid)
    if proc.returncode != 0:
        print(errors.rstrip(), file=sys.stderr)  # the whole story, for the form's log
        last = [line.strip() for line in errors.splitlines() if line.strip()][-1:]
        raise RuntimeError(f"{out / BETON}: FFCV's writer failed (exit {proc.returncode})"
                           + "".join(f": {line}" for line in last))


def end_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


# ---------------------------------------------------------------- the child's side (.venv-ffcv)


class PhotoFolder:
    """The photos as FFCV's DatasetWriter reads an indexed dataset: (RGB PIL image, label)."""

    def __init__(self, src: Path) -> None:
        self.items = list_photos(src)

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


def ffcv_loader(job: Job) -> Any:
    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import RandomHorizontalFlip, ToTensor, ToTorchImage

    decode = RandomResizedCropRGBImageDecoder((CROP, CROP), scale=SCALE, ratio=RATIO)
    pipelines = {"image": [decode, RandomHorizontalFlip(), ToTensor(), ToTorchImage()],
                 "label": [IntDecoder(), ToTensor()]}
    return Loader(str(Path(job.data) / BETON), batch_size=job.batch, num_workers=job.workers,
                  order=OrderOption.RANDOM, os_cache=True, drop_last=False, seed=job.seed,
                  pipelines=pipelines)


def ffcv_batches(job: Job) -> Batches:
    loader = ffcv_loader(job)
    for epoch in range(job.total_epochs):
        for images, _ in loader:
            yield epoch, images


def child_main(job_json: str, result_file: Path) -> None:
    """Measure one run in this (fresh) process, as bench_loader's child does for its tools."""
    from benchmarks.bench_loader import Job, measure

    job = Job(**json.loads(job_json))

    def measure_run() -> Record:
        _, import_s = timed(lambda: [importlib.import_module(m) for m in MODULES])
        return {**measure(ffcv_batches(job), job), "import_s": import_s}

    write_child_result(result_file, measure_run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", nargs=3, metavar=("SRC", "BETON", "WORKERS"))
    parser.add_argument("--one", action="store_true")
    parser.add_argument("--job")
    parser.add_argument("--result", type=Path)
    args = parser.parse_args(argv)
    if args.write:
        write_beton(Path(args.write[0]), Path(args.write[1]), int(args.write[2]))
    elif args.one and args.job and args.result:
        child_main(args.job, args.result)
    else:
        parser.error("--write, or --one with --job and --result")
    return 0


if __name__ == "__main__":
    sys.exit(main())
