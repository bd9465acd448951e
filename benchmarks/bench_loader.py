"""Loader throughput, side by side on one machine, one set of photos and one job.

    .venv/bin/python -m benchmarks.bench_loader [--photos DIR] [--workers 2] [--warmup 1]
                                                [--epochs 2] [--repeats 3] [--skip dali]

The job, for every tool: decode, random-resized crop to 224 (area 0.08-1, log-uniform aspect
3/4-4/3, ten tries then a centre crop), random horizontal flip, uint8 batches of 256 shaped
256 x 3 x 224 x 224, on --workers processes (or DALI threads). The tools:

  torch       torch DataLoader over the JPEG folder, PIL in an ImageFolder-style Dataset
  dali        DALI's own CPU pipeline over the JPEG folder (readers.file, image_random_crop)
  webdataset  WebDataset over tar shards of the photos re-encoded at shorter side 256
  litdata     LitData StreamingDataset over an optimize()d copy at shorter side 256
  datapipe    datapipe.Loader over `datapipe convert images` shards, decode="cpu"
  datapipe-dali   the same with decode="dali"
  ffcv        FFCV's Loader over a .beton, in .venv-ffcv (benchmarks/ffcv_peer.py)
  ceiling     datapipe.bench.decode_ceiling: plain PIL decode of every stored image

The three converted forms hold the same JPEG bytes (datapipe's own resize + re-encode), so
they pay the same decode; they are made once, before and outside any timing, and reused by
later runs. Every run is a fresh Python process; it iterates --warmup epochs, then --epochs
measured ones: the clock runs from the warm-up's last batch to the last batch, as the ceiling
is measured with its pool warm. The time to the first batch is reported as start-up, and the
first epoch's images/s beside the steady figure. Runs of the different tools are interleaved,
one at a time. Prints a Markdown table and saves it to bench-results/loader.md and .json.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import io
import json
import math
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import ffcv_peer
from benchmarks.common import (
    BENCH_DATA,
    announce_machine,
    cores,
    goal_verdict,
    machine_line,
    markdown_table,
    median,
    publish,
    ratio,
    timed,
    tree_cpu_seconds,
    warm_page_cache,
)
from benchmarks.fixtures import (
    BATCH,
    CHILD_ENV,
    CROP,
    CROP_TRIES,
    PIECES,
    RATIO,
    SCALE,
    ensure_form,
    ensure_photos,
    list_photos,
    make_datapipe,
    photo_stats,
    prepare_form_child,
)
from benchmarks.runs import (
    CHILD_FAILURES,
    Outcome,
    Record,
    busy_warning,
    check_skip,
    initial_outcome,
    outcomes_data,
    run_one,
    run_rounds,
    skip_names,
    write_child_result,
)

if TYPE_CHECKING:
    import torch
    from PIL import Image

SHUFFLE_BUFFER = 1000
GOALS = {"torch": 3.0, "dali": 2.0}  # datapipe (decode="cpu") >= this many times the tool
CEILING_GOAL = 0.85  # datapipe >= this fraction of the decode-only ceiling


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


# ---------------------------------------------------------------- the runners (in the child)


def torch_batches(job: Job) -> Batches:
    from torch.utils.data import DataLoader

    loader = DataLoader(JpegFolder(job.data), batch_size=job.batch, shuffle=True,
                        num_workers=job.workers, persistent_workers=True)
    for epoch in range(job.total_epochs):
        for images, _ in loader:
            yield epoch, images


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
    loader = wds.WebLoader(dataset, batch_size=None, num_workers=job.workers,
                           persistent_workers=True)
    for epoch in range(job.total_epochs):
        for images, _ in loader:
            yield epoch, images


def litdata_batches(job: Job) -> Batches:
    from litdata import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(job.data, shuffle=True, seed=job.seed, transform=litdata_sample)
    loader = StreamingDataLoader(dataset, batch_size=job.batch, num_workers=job.workers,
                                 persistent_workers=True)
    for epoch in range(job.total_epochs):
        for images, _ in loader:
            yield epoch, images


def datapipe_batches(job: Job, decode: str) -> Batches:
    import datapipe as dp

    transform = dp.image.RandomResizedCrop(CROP) | dp.image.HorizontalFlip()
    with dp.Loader(job.data, batch_size=job.batch, shuffle=True, seed=job.seed,
                   num_workers=job.workers, decode=decode, transform=transform) as loader:
        for epoch in range(job.total_epochs):
            for batch in loader:
                yield epoch, batch["image"]


def check_batch(images: torch.Tensor, batch: int) -> None:
    """Proof that the tool did the whole job: a full batch of 224 x 224 crops as uint8 CHW."""
    import torch

    shape = (batch, 3, CROP, CROP)
    if tuple(images.shape) != shape or images.dtype != torch.uint8:
        raise RuntimeError(f"first batch is {tuple(images.shape)} {images.dtype}, "
                           f"expected {shape} torch.uint8")


def measure(batches: Batches, job: Job) -> dict[str, Any]:
    """Images/s, and images per CPU-second of the whole process tree, over the epochs after
    the warm-up: the clock starts when the warm-up's last batch arrives (with no warm-up, at
    the first batch, which is then not counted) and stops when the last batch arrives, so
    shutting the tool's workers down is not counted. Also the first epoch's own images/s,
    from its first batch on: what a job too short to warm up sees."""
    started = time.perf_counter()
    per_epoch = [0] * job.total_epochs
    arrivals: list[tuple[int, float, float]] = []  # (epoch, seconds, tree CPU seconds)
    for epoch, images in batches:
        if not arrivals:
            check_batch(images, job.batch)
        arrivals.append((epoch, time.perf_counter(), tree_cpu_seconds()))
        per_epoch[epoch] += len(images)
    first_size = min(job.batch, per_epoch[0])
    # The clock starts at the arrival before the first measured batch.
    start = max(0, next(i for i, a in enumerate(arrivals) if a[0] >= job.warmup) - 1)
    measured = sum(per_epoch[job.warmup:]) - (0 if job.warmup else first_size)
    seconds = arrivals[-1][1] - arrivals[start][1]
    cpu = arrivals[-1][2] - arrivals[start][2]
    first_epoch_s = max(a[1] for a in arrivals if a[0] == 0) - arrivals[0][1]
    return {"images": measured, "seconds": seconds,
            "rate": measured / seconds if seconds > 0 else 0.0,
            "cpu_s": cpu, "cpu_rate": measured / cpu if cpu > 0 else 0.0,
            "first_epoch_rate": ((per_epoch[0] - first_size) / first_epoch_s
                                 if first_epoch_s > 0 else 0.0),
            "start_s": arrivals[0][1] - started, "epoch_images": per_epoch}


def measure_ceiling(job: Job) -> dict[str, Any]:
    """decode_ceiling's images/s; for images per CPU-second, the CPU of a run with no images
    (pool start-up and shutdown) is subtracted and its warm-up decodes are counted."""
    import numpy as np

    from datapipe.bench import decode_ceiling
    from datapipe.format.dataset import Dataset

    with Dataset(job.data) as ds:
        n = len(ds)
    before = tree_cpu_seconds()
    decode_ceiling(job.data, job.workers, limit=0)
    start = tree_cpu_seconds()
    rate = decode_ceiling(job.data, job.workers)
    cpu = tree_cpu_seconds() - start - (start - before)
    # decode_ceiling warms its pool on the first 8 images of each of workers * 4 chunks.
    warm = sum(min(8, len(c)) for c in np.array_split(np.arange(n), job.workers * 4))
    return {"rate": rate, "cpu_s": cpu, "cpu_rate": (n + warm) / cpu if cpu > 0 else 0.0}


# ---------------------------------------------------------------- the tools


@dataclass(frozen=True)
class Peer:
    name: str  # for --skip and the child's --one
    label: str
    form: str  # what it reads: "photos" or the name of a converted form
    batches: Callable[[Job], Batches] | None  # None: the decode-only ceiling
    # Checked for without importing them (a missing one makes a "not installed" row), and
    # imported by the child before its clock starts, so start-up times exclude imports.
    modules: tuple[str, ...] = ()


PEERS = (
    Peer("torch", "torch DataLoader + PIL", "photos", torch_batches, ("torch",)),
    Peer("dali", "DALI CPU pipeline", "photos", dali_batches, ("torch", "nvidia.dali")),
    Peer("webdataset", "WebDataset + WebLoader", "webdataset", webdataset_batches,
         ("torch", "webdataset")),
    Peer("litdata", "LitData StreamingDataLoader", "litdata", litdata_batches,
         ("torch", "litdata")),
    Peer("datapipe", 'datapipe Loader, decode="cpu"', "datapipe",
         functools.partial(datapipe_batches, decode="cpu"), ("torch", "datapipe.loader")),
    Peer("datapipe-dali", 'datapipe Loader, decode="dali"', "datapipe",
         functools.partial(datapipe_batches, decode="dali"),
         ("torch", "datapipe.loader", "nvidia.dali")),
    Peer("ceiling", "decode-only ceiling (full decode)", "datapipe", None),
    Peer("ffcv", "FFCV Loader (.venv-ffcv)", "ffcv", ffcv_peer.ffcv_batches),
)
PEERS_BY_NAME = {p.name: p for p in PEERS}
FORM_LABELS = {"photos": "JPEG folder", "webdataset": f"{PIECES} tar shards",
               "litdata": f"{PIECES} LitData chunks", "datapipe": "datapipe shards",
               "ffcv": ffcv_peer.FORM_LABEL}


def child_main(name: str, job_json: str, result_file: Path) -> None:
    """Measure one run of one tool in this (fresh) process."""
    job = Job(**json.loads(job_json))
    peer = PEERS_BY_NAME[name]

    def measure_run() -> Record:
        if peer.batches is None:
            return measure_ceiling(job)
        _, import_s = timed(lambda: [importlib.import_module(m) for m in peer.modules])
        return {**measure(peer.batches(job), job), "import_s": import_s}

    write_child_result(result_file, measure_run)


# ---------------------------------------------------------------- converted forms (outside timing)


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


FORM_MAKERS: dict[str, Callable[[Path, Path, int], None]] = {
    "webdataset": make_webdataset, "litdata": make_litdata, "datapipe": make_datapipe,
    "ffcv": ffcv_peer.make_beton}


# ---------------------------------------------------------------- running everything


def prepare_forms(src: Path, workers: int, outcomes: dict[str, Outcome]
                  ) -> dict[str, dict[str, Any]]:
    """Every converted form a tool still in the running reads; a failure fails its readers."""
    records: dict[str, dict[str, Any]] = {"photos": {"path": str(src)}}
    wanted = {p.form for p in PEERS if outcomes[p.name].status == "ok"} - {"photos"}
    for form in sorted(wanted):
        try:
            records[form] = ensure_form(form, src, workers, "benchmarks.bench_loader")
        except CHILD_FAILURES as exc:
            print(f"failed: {exc}", flush=True)
            for peer in PEERS:
                if peer.form == form and outcomes[peer.name].status == "ok":
                    outcomes[peer.name].status = f"failed: converting to {form}: {exc}"
    for record in records.values():  # no tool pays, or is spared, cold-disk reads
        warm_page_cache(sorted(Path(record["path"]).rglob("*")))
    return records


def run_all(args: argparse.Namespace, forms: dict[str, dict[str, Any]],
            outcomes: dict[str, Outcome]) -> None:
    """`args.repeats` rounds, each running every tool once, so drift spreads over all."""
    def attempt(name: str, run_dir: Path) -> Record:
        job = Job(forms[PEERS_BY_NAME[name].form]["path"], args.workers, args.epochs,
                  args.warmup, batch=args.batch_size)
        if name == "ffcv":  # its own venv
            return ffcv_peer.run_one(job, run_dir)
        return run_one("benchmarks.bench_loader", name, job, run_dir, CHILD_ENV)

    run_rounds(args.repeats, list(PEERS_BY_NAME), outcomes, BENCH_DATA / "loader-runs",
               args.settle, attempt, progress, brief_failures=True)


def progress(_: str, run: Record) -> str:
    return f"{run['rate']:,.0f} images/s (other work: {run['others_cores']:.2f} cores)"


# ---------------------------------------------------------------- the report


def rate(outcomes: dict[str, Outcome], name: str, key: str = "rate") -> float | None:
    """Median images/s ("rate") or images per CPU-second ("cpu_rate") of a tool's runs."""
    outcome = outcomes[name]
    if outcome.status != "ok" or not outcome.runs:
        return None
    return median([r[key] for r in outcome.runs]) or None


def _verdict(value: float, goal: float, unit: str = "×") -> str:
    return goal_verdict(goal, value >= goal, unit)


def goal_parts(outcomes: dict[str, Outcome], key: str) -> list[str]:
    """datapipe against each goal, by images/s or by images per CPU-second."""
    ours, parts = rate(outcomes, "datapipe", key), []
    for name, goal in GOALS.items():
        theirs, label = rate(outcomes, name, key), PEERS_BY_NAME[name].label
        parts.append(f"{ours / theirs:.2f}× {label} ({_verdict(ours / theirs, goal)})"
                     if ours and theirs else f"{label}: {outcomes[name].status}")
    ceiling = rate(outcomes, "ceiling", key)
    parts.append(f"{ours / ceiling:.2f} of the decode-only ceiling "
                 f"({_verdict(ours / ceiling, CEILING_GOAL, '')})" if ours and ceiling
                 else f"ceiling: {outcomes['ceiling'].status}")
    return parts


def headline(outcomes: dict[str, Outcome]) -> str:
    ours = rate(outcomes, "datapipe")
    if ours is None:
        return f"**datapipe (decode=\"cpu\"): {outcomes['datapipe'].status}.**"
    return (f"**datapipe (decode=\"cpu\"): {ours:,.0f} images/s = "
            + "; ".join(goal_parts(outcomes, "rate")) + ".** Per CPU-second (steadier when "
            "other work shares the cores): " + "; ".join(goal_parts(outcomes, "cpu_rate")) + ".")


def table_rows(outcomes: dict[str, Outcome]) -> list[list[str]]:
    ours, ceiling = rate(outcomes, "datapipe"), rate(outcomes, "ceiling")
    rows = []
    for peer in PEERS:
        outcome, theirs = outcomes[peer.name], rate(outcomes, peer.name)
        reads = FORM_LABELS[peer.form]
        if theirs is None:
            rows.append([peer.label, reads, outcome.status, "", "", "", "", "", ""])
            continue
        runs = " / ".join(f"{r['rate']:,.0f}" for r in outcome.runs)
        loader = peer.batches is not None  # the ceiling has no epochs or start-up
        start = f"{median([r['start_s'] for r in outcome.runs]):.1f}" if loader else ""
        first_epoch = rate(outcomes, peer.name, "first_epoch_rate") if loader else None
        per_cpu = rate(outcomes, peer.name, "cpu_rate")
        rows.append([peer.label, reads, f"{theirs:,.0f}", ratio(ours, theirs),
                     ratio(theirs, ceiling, ""), f"{per_cpu:,.0f}" if per_cpu else "–",
                     f"{first_epoch:,.0f}" if first_epoch else "", start, runs])
    return rows


def epoch_problems(outcomes: dict[str, Outcome], expected: int) -> list[str]:
    """Tools that delivered other than exactly the folder in some epoch (not comparable)."""
    notes = []
    for name, outcome in outcomes.items():
        counts = {n for r in outcome.runs for n in r.get("epoch_images", [expected])}
        if counts - {expected}:
            notes.append(f"{PEERS_BY_NAME[name].label} delivered {sorted(counts)} images per "
                         f"epoch, not {expected}.")
    return notes


def notes(meta: dict[str, Any], outcomes: dict[str, Outcome]) -> list[str]:
    forms = meta["forms"]
    made = ", ".join(f"{name} {forms[name]['bytes'] / 1e6:.1f} MB (made in "
                     f"{forms[name]['seconds']:.0f} s)" for name in sorted(forms)
                     if name != "photos")
    lines = [
        "Start-up s: from creating the loader to its first batch (workers, DALI build, "
        "shard index; imports excluded). First epoch images/s: the first epoch alone, from "
        "its first batch on (buffers being made, pages and caches still cold). ÷ ceiling: "
        "the tool's images/s over the ceiling's. "
        "images/CPU-s: images per CPU-second of the tool's whole process tree (workers, "
        "threads) over the same batches; unlike images/s it hardly changes when other work "
        "takes cores, but it does not show a tool that leaves cores idle.",
        "torch and DALI read the original photos; WebDataset, LitData and datapipe read the "
        f"same photos re-encoded at shorter side 256, JPEG q90 (identical bytes). {made}; "
        "not timed.",
        "DALI runs fixed-size batches: the last batch of each epoch is padded to "
        f"{meta['batch']} with "
        f"copies of one sample ({-meta['photos']['count'] % meta['batch']} decoded and dropped per "
        "epoch), the price of DALI's reader.",
        *epoch_problems(outcomes, meta["photos"]["count"]),
    ]
    warning = busy_warning(outcomes)
    if warning:
        lines.append(warning)
    return lines


def clocked(meta: dict[str, Any]) -> str:
    """How each run was clocked, for the report."""
    if not meta["warmup"]:
        return f"{meta['epochs']} epochs, clocked from its first batch"
    return (f"{meta['warmup']} warm-up and {meta['epochs']} measured epochs, clocked from the "
            "warm-up's last batch")


def render(info: dict[str, Any], meta: dict[str, Any], outcomes: dict[str, Outcome]) -> str:
    photos = meta["photos"]
    return "\n".join([
        "# Loader throughput", "", headline(outcomes), "",
        f"Machine: {machine_line(info)}.", "",
        f"Job: {photos['count']} JPEG photos ({photos['megabytes']:.1f} MB, shorter side "
        f"{photos['min_short_side']}-{photos['max_short_side']} px) → random-resized crop "
        f"{CROP} + horizontal flip → uint8 batches of {meta['batch']}, {meta['workers']} workers. "
        f"Each figure: median of {meta['repeats']} runs, each a fresh process iterating "
        f"{clocked(meta)}.", "",
        markdown_table(["tool", "reads", "images/s", "datapipe ÷ tool", "÷ ceiling",
                        "images/CPU-s", "first epoch images/s", "start-up s",
                        "runs images/s"], table_rows(outcomes)),
        "", *[f"- {line}" for line in notes(meta, outcomes)],
    ])


# ---------------------------------------------------------------- command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--photos", type=Path, help="existing ImageFolder (default: bench-data/photos-COUNT, "
        "made with tools/make_photos.py if missing)")
    add("--count", type=int, default=2000, help="photos to make without --photos (2000)")
    add("--workers", type=int, default=cores(), help="processes or threads per tool "
        "(all cores)")
    add("--warmup", type=int, default=1, help="epochs per run before the clock starts (1)")
    add("--epochs", type=int, default=2, help="measured epochs per run, after the warm-up (2)")
    add("--repeats", type=int, default=3, help="runs per tool; the median counts (3)")
    add("--batch-size", type=int, default=BATCH, help=f"images per batch ({BATCH})")
    add("--settle", type=float, default=10.0, help="wait up to this many seconds for other "
        "work on the machine to stop before each run (10)")
    add("--skip", default="", help="comma-separated: " + ", ".join(PEERS_BY_NAME))
    add("--one", help=argparse.SUPPRESS)  # internal: measure one run in this process
    add("--prepare", help=argparse.SUPPRESS)  # internal: build one converted form
    add("--job", help=argparse.SUPPRESS)
    add("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.count, args.workers, args.epochs, args.repeats, args.batch_size) < 1 \
            or args.warmup < 0:
        parser.error("--count, --workers, --epochs, --repeats and --batch-size must be "
                     "positive, --warmup zero or more")
    check_skip(parser, args.skip, PEERS_BY_NAME)
    return args


def child_modes(args: argparse.Namespace) -> bool:
    """Run an internal child mode if one was asked for; True if so."""
    if args.one:
        child_main(args.one, args.job, args.result)
    elif args.prepare:
        prepare_form_child(FORM_MAKERS, args.prepare, args.job, args.result)
    return bool(args.one or args.prepare)


def collect(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """Every tool measured as `args` say: the Markdown report and the results' data (machine,
    meta with prepare_s and benchmark_s, headline, outcomes). Shared by main and the suite."""
    skip = skip_names(args.skip)
    outcomes = {p.name: initial_outcome((p.name,), skip, p.modules) for p in PEERS}
    outcomes["ffcv"] = ffcv_peer.initial(skip)
    info = announce_machine()
    photos = ensure_photos(args.photos, args.count)
    (forms, stats), prep_s = timed(lambda: (prepare_forms(photos, args.workers, outcomes),
                                            photo_stats(photos)))
    meta = {"photos": stats, "forms": forms, "workers": args.workers, "warmup": args.warmup,
            "epochs": args.epochs, "repeats": args.repeats, "batch": args.batch_size,
            "prepare_s": round(prep_s, 1)}
    _, bench_s = timed(lambda: run_all(args, forms, outcomes))
    meta["benchmark_s"] = round(bench_s, 1)
    return render(info, meta, outcomes), {
        "machine": info, "meta": meta, "headline": headline(outcomes),
        "outcomes": outcomes_data(outcomes)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if child_modes(args):
        return 0
    report, data = collect(args)
    publish("loader", report, data, data["meta"]["prepare_s"], data["meta"]["benchmark_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
