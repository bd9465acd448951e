"""Conversion throughput, side by side on one machine and one input.

    .venv/bin/python -m benchmarks.bench_convert [--photos DIR] [--repeats 3] [--skip litdata]

Images: datapipe's `convert_images` against LitData's `optimize()` and a WebDataset tar writer
fed by `multiprocessing.Pool.imap`, both running `plain_transform`, the decode + EXIF
transpose + RGB + resize + JPEG re-encode a user of those tools would write. Text: datapipe's
`convert_text` (bytes and a real WordPiece tokenizer) against Hugging Face `datasets`
`.map(batched=True, num_proc=cores)` with the same tokenizer.

Fidelity, beside speed: for datapipe (and, with --before DIR, the same conversion run from
another checkout, e.g. main) the median PSNR of the stored images against a Pillow reference
(open, exif_transpose, ICC profile -> sRGB, RGB, Lanczos so the short side is 256, sides
rounded to nearest), next to the PSNR a full decode with datapipe's resize and encoding gets.

Every run is a fresh Python process writing into a fresh directory, and its time includes
importing the library and starting its workers: a user pays both. Runs of the different tools
are interleaved, so slow drift of the machine does not favour one of them. Prints a Markdown
table and saves it to bench-results/convert.md and .json.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import (
    BENCH_DATA,
    announce_machine,
    cores,
    git_revision,
    goal_verdict,
    machine_line,
    markdown_table,
    median,
    publish,
    ratio,
    timed,
    tree_bytes,
    verdict,
    warm_page_cache,
)
from benchmarks.fixtures import (
    CHILD_ENV,
    TOKENIZER_DIST,
    ensure_corpus,
    ensure_photos,
    list_photos,
    photo_stats,
    wordpiece_tokenizer,
)
from benchmarks.runs import (
    Outcome,
    Record,
    busy_warning,
    check_skip,
    dist_absent,
    initial_outcome,
    least_disturbed,
    outcomes_data,
    run_one,
    run_rounds,
    skip_names,
)

SHORT_SIDE = 256
QUALITY = 90
SHARD_BYTES = 256 << 20
GOAL_VS_LITDATA = 2.0


@dataclass(frozen=True)
class Job:
    """What one measured run gets, passed to the child process as JSON."""

    src: str
    out: str
    workers: int
    tokenizer: str = "bytes"  # "bytes" or a tokenizer.json path
    code: str = ""  # another checkout whose datapipe and preprocess to run ("" = this one)


Runner = Callable[[Job], dict[str, int]]


# ---------------------------------------------------------------- what a peer's user writes


def plain_transform(item: tuple[str, int]) -> dict[str, Any]:
    """One photo the straightforward way: full decode, orient, RGB, resize, re-encode."""
    from PIL import Image, ImageOps

    path, label = item
    with Image.open(path) as opened:
        image = ImageOps.exif_transpose(opened).convert("RGB")
    scale = SHORT_SIDE / min(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    image = image.resize(size, Image.Resampling.BICUBIC)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=QUALITY)
    return {"image": buffer.getvalue(), "label": label}


# ---------------------------------------------------------------- the runners (in the child)


def load_datapipe_images() -> Runner:
    from preprocess.image_ops import ImageSettings
    from preprocess.images import convert_images
    from preprocess.output import OutputOptions

    def run(job: Job) -> dict[str, int]:
        result = convert_images(Path(job.src), OutputOptions(Path(job.out)), ImageSettings(),
                                job.workers)
        return {"items": result.inputs - len(result.rejects), "rejects": len(result.rejects)}

    return run


def load_litdata() -> Runner:
    import litdata

    def run(job: Job) -> dict[str, int]:
        items = list_photos(Path(job.src))
        litdata.optimize(fn=plain_transform, inputs=items, output_dir=job.out,
                         num_workers=job.workers, chunk_bytes=SHARD_BYTES)
        return {"items": len(items)}

    return run


def load_webdataset() -> Runner:
    import multiprocessing

    import webdataset as wds

    def run(job: Job) -> dict[str, int]:
        items = list_photos(Path(job.src))
        Path(job.out).mkdir(parents=True)
        pattern = str(Path(job.out) / "shard-%06d.tar")
        with wds.ShardWriter(pattern, maxsize=SHARD_BYTES, verbose=0) as sink, \
                multiprocessing.Pool(job.workers) as pool:
            # chunksize as in datapipe's engine, so both pay the same per-item IPC.
            for index, sample in enumerate(pool.imap(plain_transform, items, chunksize=16)):
                sink.write({"__key__": f"{index:08d}", "jpg": sample["image"],
                            "cls": sample["label"]})
        return {"items": len(items)}

    return run


def load_datapipe_text() -> Runner:
    from preprocess.output import OutputOptions
    from preprocess.text import convert_text
    from preprocess.text_sources import TextOptions

    def run(job: Job) -> dict[str, int]:
        result = convert_text([Path(job.src)], OutputOptions(Path(job.out)), job.tokenizer,
                              TextOptions(), workers=job.workers)
        return {"items": result.inputs, "tokens": result.extra["tokens_this_run"]}

    return run


def load_hf_datasets() -> Runner:
    import datasets
    from tokenizers import Tokenizer

    datasets.disable_progress_bars()

    def run(job: Job) -> dict[str, int]:
        files = sorted(str(p) for p in Path(job.src).glob("*.txt"))
        data = datasets.load_dataset("text", data_files=files, split="train",
                                     cache_dir=str(Path(job.out) / "cache"))
        tokenizer = Tokenizer.from_file(job.tokenizer)
        # A tokenizer.json saved for inference truncates and pads (here to 128); pretokenizing
        # for training needs every token and no padding, as datapipe does.
        tokenizer.no_truncation()
        tokenizer.no_padding()

        def encode(batch: dict[str, list[str]]) -> dict[str, list[list[int]]]:
            encodings = tokenizer.encode_batch(batch["text"], add_special_tokens=False)
            return {"input_ids": [e.ids for e in encodings]}

        data = data.map(encode, batched=True, num_proc=job.workers, remove_columns=["text"])
        return {"items": len(data), "tokens": _count_tokens(data)}

    return run


def _count_tokens(data: Any) -> int:
    import pyarrow.compute as pc

    return int(pc.sum(pc.list_value_length(data.data.column("input_ids"))).as_py())


@dataclass(frozen=True)
class Peer:
    name: str  # for --skip and the child's --one
    label: str
    kind: str  # "images" or "text"
    load: Callable[[], Runner]
    needs: tuple[str, ...] = ()
    tokenizer: str = ""  # text only: "bytes" or "wordpiece"


PEERS = (
    Peer("datapipe", "datapipe convert_images", "images", load_datapipe_images),
    Peer("datapipe-before", "datapipe convert_images, --before", "images",
         load_datapipe_images),
    Peer("litdata", "LitData optimize()", "images", load_litdata, ("litdata",)),
    Peer("webdataset", "WebDataset ShardWriter + Pool.imap", "images", load_webdataset,
         ("webdataset",)),
    Peer("datapipe-text-bytes", "datapipe convert_text", "text", load_datapipe_text,
         tokenizer="bytes"),
    Peer("datapipe-text-wordpiece", "datapipe convert_text", "text", load_datapipe_text,
         (TOKENIZER_DIST,), "wordpiece"),
    Peer("datasets", "HF datasets .map(num_proc)", "text", load_hf_datasets,
         ("datasets", TOKENIZER_DIST), "wordpiece"),
)
PEERS_BY_NAME = {p.name: p for p in PEERS}


def child_main(name: str, job_json: str, result_file: Path) -> None:
    """Measure one run of one peer in this (fresh) process; time includes its imports."""
    job = Job(**json.loads(job_json))
    if job.code:  # the other checkout's packages, not this one's
        sys.path.insert(0, job.code)
        for module in [m for m in sys.modules if m.split(".")[0] in ("datapipe", "preprocess")]:
            del sys.modules[module]
    start = time.perf_counter()
    runner = PEERS_BY_NAME[name].load()
    loaded = time.perf_counter()
    counts = runner(job)
    seconds = time.perf_counter() - start
    result_file.write_text(json.dumps({**counts, "seconds": seconds,
                                       "import_s": loaded - start}))


# ---------------------------------------------------------------- inputs


# ---------------------------------------------------------------- running everything


def run_once(peer: Peer, job: Job, run_dir: Path, fidelity: Fidelity | None) -> Record:
    record = run_one("benchmarks.bench_convert", peer.name, job, run_dir, CHILD_ENV)
    record["output_bytes"] = tree_bytes(Path(job.out))
    if fidelity is not None and peer.name.startswith("datapipe") and peer.kind == "images":
        record["psnr"] = fidelity.stored_psnr(Path(job.out))
    shutil.rmtree(job.out)
    return record


# ---------------------------------------------------------------- fidelity


def reference_image(path: str) -> Any:
    """What the photo looks like at SHORT_SIDE: open, exif_transpose, ICC profile -> sRGB, RGB,
    Lanczos so the short side is SHORT_SIDE, each side rounded to nearest (halves up)."""
    import numpy as np
    from PIL import Image, ImageCms, ImageOps

    with Image.open(path) as opened:
        image = ImageOps.exif_transpose(opened)
        icc = image.info.get("icc_profile")
        if icc and image.mode in ("RGB", "L", "CMYK"):
            source = ImageCms.ImageCmsProfile(io.BytesIO(icc))
            image = ImageCms.profileToProfile(image, source, ImageCms.createProfile("sRGB"),
                                              outputMode="RGB")
        image = image.convert("RGB")
    shorter = min(image.size)
    size = tuple((2 * side * SHORT_SIDE + shorter) // (2 * shorter) for side in image.size)
    return np.asarray(image.resize(size, Image.Resampling.LANCZOS))


def full_decode_payload(path: str) -> bytes:
    """The full-decode path: the reference's pixels encoded as datapipe encodes them."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(reference_image(path)).save(buffer, "JPEG", quality=QUALITY,
                                                subsampling="4:2:0")
    return buffer.getvalue()


def psnr(ours: Any, reference: Any) -> float | None:
    """PSNR in dB, or None when the sizes differ (a wrong size is no match at any dB)."""
    import numpy as np

    if ours.shape != reference.shape:
        return None
    mse = float(np.mean((ours.astype(np.float64) - reference.astype(np.float64)) ** 2))
    return 10 * math.log10(255 ** 2 / max(mse, 1e-10))


class Fidelity:
    """PSNR of stored images against the reference, over an evenly spaced sample of photos."""

    def __init__(self, src: Path, count: int) -> None:
        photos = list_photos(src)
        step = max(1, len(photos) // count)
        self.sample = {Path(p).relative_to(src).as_posix(): p for p, _ in photos[::step][:count]}
        self.references = {key: reference_image(path) for key, path in self.sample.items()}

    def stored_psnr(self, out: Path) -> dict[str, Any]:
        from PIL import Image

        from datapipe.format import Dataset

        with Dataset(out) as ds:
            paths = {ds[i]["path"]: i for i in range(len(ds))}
            stored = {key: ds[paths[key]]["image"].tobytes() for key in self.sample}
        return self._summary([psnr(np.asarray(Image.open(io.BytesIO(payload)).convert("RGB")),
                                   self.references[key]) for key, payload in stored.items()])

    def full_decode_psnr(self) -> dict[str, Any]:
        from PIL import Image

        return self._summary([psnr(np.asarray(Image.open(io.BytesIO(full_decode_payload(p)))),
                                   self.references[key]) for key, p in self.sample.items()])

    @staticmethod
    def _summary(values: list[float | None]) -> dict[str, Any]:
        sized = [v for v in values if v is not None]
        return {"median_db": median(sized) if sized else None, "images": len(values),
                "wrong_size": len(values) - len(sized)}


def run_all(args: argparse.Namespace, inputs: dict[str, Path],
            outcomes: dict[str, Outcome], fidelity: Fidelity | None) -> None:
    """`args.repeats` rounds, each running every peer once, so drift spreads over all; a run
    that other work disturbed is redone up to `args.retries` times. Fidelity is measured on
    each datapipe variant's first run (the output is the same every run)."""
    tokenizer = wordpiece_tokenizer()

    def attempt(name: str, run_dir: Path) -> Record:
        peer = PEERS_BY_NAME[name]
        spec = str(tokenizer) if peer.tokenizer == "wordpiece" else "bytes"
        code = str(args.before.resolve()) if name == "datapipe-before" else ""
        job = Job(str(inputs[peer.kind]), str(run_dir / "out"), args.workers, spec, code)
        check = fidelity if not outcomes[name].runs else None
        return least_disturbed(lambda: run_once(peer, job, run_dir, check), args.settle,
                               args.retries)

    run_rounds(args.repeats, list(PEERS_BY_NAME), outcomes, BENCH_DATA / "convert-runs",
               args.settle, attempt, progress)


def progress(_: str, run: Record) -> str:
    return f"{run['seconds']:.1f} s (other work: {run['others_cores']:.2f} cores)"


# ---------------------------------------------------------------- the report


def rate(outcome: Outcome, key: str) -> float | None:
    """Items or tokens per second over the median run time."""
    if outcome.status != "ok" or not outcome.runs:
        return None
    return outcome.runs[0][key] / median([r["seconds"] for r in outcome.runs])


def _times(outcome: Outcome) -> tuple[str, ...]:
    """Median, every run, median import and median CPU time of the run's processes."""
    seconds = [r["seconds"] for r in outcome.runs]
    return (f"{median(seconds):.2f}", " / ".join(f"{s:.2f}" for s in seconds),
            f"{median([r['import_s'] for r in outcome.runs]):.2f}",
            f"{median([r['cpu_s'] for r in outcome.runs]):.1f}")


def stored_psnr(outcome: Outcome) -> dict[str, Any] | None:
    return next((r["psnr"] for r in outcome.runs if "psnr" in r), None)


def psnr_cell(summary: dict[str, Any] | None) -> str:
    if summary is None or summary["median_db"] is None:
        return "" if summary is None else "all sizes wrong"
    wrong = f", {summary['wrong_size']} of {summary['images']} sized wrong" \
        if summary["wrong_size"] else ""
    return f"{summary['median_db']:.2f}{wrong}"


def image_rows(outcomes: dict[str, Outcome]) -> list[list[str]]:
    ours = rate(outcomes["datapipe"], "items")
    rows = []
    for peer in (p for p in PEERS if p.kind == "images"):
        outcome = outcomes[peer.name]
        theirs = rate(outcome, "items")
        if theirs is None:
            rows.append([peer.label, outcome.status, *[""] * 7])
            continue
        megabytes = median([r["output_bytes"] for r in outcome.runs]) / 1e6
        rows.append([peer.label, f"{theirs:,.0f}", ratio(ours, theirs),
                     psnr_cell(stored_psnr(outcome)), *_times(outcome), f"{megabytes:.1f}"])
    return rows


def fidelity_line(outcomes: dict[str, Outcome], meta: dict[str, Any]) -> str | None:
    """Against the goals: median PSNR within 0.5 dB of the full-decode path, at >= 0.9x the
    images/s of --before."""
    ours, full = stored_psnr(outcomes["datapipe"]), meta.get("full_decode_psnr")
    if ours is None or full is None or ours["median_db"] is None:
        return None
    gap = full["median_db"] - ours["median_db"]
    line = (f"**Fidelity: median PSNR {ours['median_db']:.2f} dB against the Pillow reference "
            f"({ours['images']} photos), {full['median_db']:.2f} dB for a full decode with the "
            f"same resize and encoding: {gap:.2f} dB apart (goal: within 0.5 dB, "
            f"{verdict(gap <= 0.5)}).")
    speed, before = rate(outcomes["datapipe"], "items"), rate(outcomes["datapipe-before"],
                                                              "items")
    if speed is not None and before is not None:
        line += (f" Speed {speed:,.0f} images/s = {speed / before:.2f}× --before's "
                 f"{before:,.0f} ({goal_verdict(0.9, speed >= 0.9 * before)}).")
    return line + "**"


def text_rows(outcomes: dict[str, Outcome], corpus_bytes: int) -> list[list[str]]:
    rows = []
    for peer in (p for p in PEERS if p.kind == "text"):
        outcome = outcomes[peer.name]
        theirs = rate(outcome, "tokens")
        if theirs is None:
            rows.append([peer.label, peer.tokenizer, outcome.status, *[""] * 7])
            continue
        mb_s = corpus_bytes / 1e6 / median([r["seconds"] for r in outcome.runs])
        ours = rate(outcomes[f"datapipe-text-{peer.tokenizer}"], "tokens")
        rows.append([peer.label, peer.tokenizer, f"{theirs / 1e6:.2f} M", f"{mb_s:.1f}",
                     ratio(ours, theirs), *_times(outcome),
                     f"{outcome.runs[0]['tokens']:,}"])
    return rows


def token_mismatches(outcomes: dict[str, Outcome]) -> list[str]:
    """Peers whose token count differs from datapipe's with the same tokenizer: not comparable."""
    found = []
    for peer in (p for p in PEERS if p.kind == "text" and not p.name.startswith("datapipe")):
        ours, theirs = outcomes[f"datapipe-text-{peer.tokenizer}"], outcomes[peer.name]
        if ours.runs and theirs.runs and ours.runs[0]["tokens"] != theirs.runs[0]["tokens"]:
            found.append(f"{peer.label} made {theirs.runs[0]['tokens']:,} tokens, datapipe "
                         f"{ours.runs[0]['tokens']:,}; their tokens/s are not comparable.")
    return found


def headline(outcomes: dict[str, Outcome]) -> str:
    ours, theirs = rate(outcomes["datapipe"], "items"), rate(outcomes["litdata"], "items")
    if ours is None:
        return f"**datapipe images: {outcomes['datapipe'].status}.**"
    if theirs is None:
        return (f"**datapipe: {ours:,.0f} images/s; LitData {outcomes['litdata'].status}, "
                "so no ratio.**")
    goal = goal_verdict(GOAL_VS_LITDATA, ours >= GOAL_VS_LITDATA * theirs)
    return (f"**datapipe: {ours:,.0f} images/s = {ours / theirs:.2f}× LitData's "
            f"{theirs:,.0f} images/s ({goal}).**")


def render(info: dict[str, Any], meta: dict[str, Any], outcomes: dict[str, Outcome]) -> str:
    photos, text = meta["photos"], meta.get("text")
    parts = [
        "# Conversion throughput", "", headline(outcomes), "",
        f"Machine: {machine_line(info)}. Code: {meta['revision']}.", "",
        f"Each figure: median of {meta['repeats']} runs, {meta['workers']} workers, each run a "
        "fresh process into a fresh directory; times include imports and worker start-up. "
        "CPU s: user + system time of all the run's processes. A run that other work on the "
        f"machine disturbed is redone, up to {meta['retries']} times.", "",
        f"## Images: {photos['count']} JPEGs ({photos['megabytes']:.1f} MB, shorter side "
        f"{photos['min_short_side']}-{photos['max_short_side']} px) → shorter side "
        f"{SHORT_SIDE}, JPEG q{QUALITY}", "",
        markdown_table(["tool", "images/s", "datapipe speed-up", "PSNR dB", "median s",
                        "runs s", "import s", "CPU s", "output MB"], image_rows(outcomes)),
    ]
    fidelity = fidelity_line(outcomes, meta)
    if fidelity:
        parts[3:3] = [fidelity, ""]
        parts.append(f"\nPSNR: median over {meta['fidelity_count']} evenly spaced "
                     "photos, each stored image against the Pillow reference; "
                     f"--before: {meta.get('before', 'not run')}.")
    if text:
        parts += ["", f"## Text: {text['megabytes']:.1f} MB of English-like lines → token ids", "",
                  markdown_table(["tool", "tokenizer", "tokens/s", "text MB/s",
                                  "datapipe speed-up", "median s", "runs s", "import s",
                                  "CPU s", "tokens"], text_rows(outcomes, text["bytes"]))]
    parts += [f"\nWarning: {w}" for w in token_mismatches(outcomes)]
    warning = busy_warning(outcomes)
    if warning:
        parts += ["", warning]
    return "\n".join(parts)


# ---------------------------------------------------------------- command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--photos", type=Path, help="existing ImageFolder (default: bench-data/photos-COUNT, "
        "made with tools/make_photos.py if missing)")
    add("--count", type=int, default=2000, help="photos to make without --photos (2000)")
    add("--repeats", type=int, default=3, help="runs per tool; the median counts (3)")
    add("--workers", type=int, default=cores(), help="processes per tool (all cores)")
    add("--text-mb", type=int, default=32, help="size of the generated text corpus (32)")
    add("--settle", type=float, default=10.0, help="wait up to this many seconds for other "
        "work on the machine to stop before each run (10)")
    add("--retries", type=int, default=2, help="redo a run disturbed by other work on the "
        "machine up to this many times, keeping the least disturbed (2)")
    add("--before", type=Path, help="another checkout (e.g. of main, with its C extension "
        "built) to run as 'datapipe-before', for speed and PSNR before and after")
    add("--fidelity-count", type=int, default=200, help="photos whose PSNR against the "
        "reference is measured, evenly spaced (200; 0 = none)")
    add("--skip", default="", help="comma-separated: " + ", ".join(p.name for p in PEERS)
        + ", or a whole kind: images, text")
    add("--one", help=argparse.SUPPRESS)  # internal: measure one run in this process
    add("--job", help=argparse.SUPPRESS)
    add("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.repeats, args.workers, args.count, args.text_mb) < 1 or args.retries < 0:
        parser.error("--repeats, --workers, --count, --text-mb must be positive, --retries >= 0")
    check_skip(parser, args.skip, [*PEERS_BY_NAME, "images", "text"])
    if args.before is not None and not (args.before / "preprocess" / "images.py").is_file():
        parser.error(f"--before {args.before}: not a datapipe checkout")
    return args


def prepare_inputs(args: argparse.Namespace, outcomes: dict[str, Outcome]
                   ) -> tuple[dict[str, Path], dict[str, Any]]:
    photos = ensure_photos(args.photos, args.count)
    inputs, meta = {"images": photos}, {"photos": photo_stats(photos)}
    if any(outcomes[p.name].status == "ok" for p in PEERS if p.kind == "text"):
        corpus = ensure_corpus(args.text_mb)
        size = warm_page_cache(sorted(corpus.glob("*.txt")))
        inputs["text"] = corpus
        meta["text"] = {"path": str(corpus), "bytes": size, "megabytes": size / 1e6}
    if wordpiece_tokenizer() is None:
        for peer in PEERS:
            if peer.tokenizer == "wordpiece" and outcomes[peer.name].status == "ok":
                outcomes[peer.name].status = f"not installed ({TOKENIZER_DIST})"
    return inputs, meta


def git_revision_of(checkout: Path) -> str:
    """The commit a checkout is at: its git HEAD, or the REVISION file an export carries."""
    marker = checkout / "REVISION"
    if marker.is_file():
        return marker.read_text().strip()
    import subprocess

    result = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True)
    return result.stdout.strip() or "unknown revision"


def collect(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """Every tool measured as `args` say: the Markdown report and the results' data (machine,
    meta with prepare_s and benchmark_s, outcomes, ...). Shared by main and the suite."""
    skip = skip_names(args.skip)
    outcomes = {p.name: initial_outcome((p.name, p.kind), skip, p.needs, dist_absent)
                for p in PEERS}
    if args.before is None:
        outcomes["datapipe-before"].status = "not run (no --before)"
    info = announce_machine()
    (inputs, meta), prep_s = timed(lambda: prepare_inputs(args, outcomes))
    fidelity = None
    if args.fidelity_count and outcomes["datapipe"].status == "ok":
        print(f"reference images for PSNR ({args.fidelity_count} photos) ...", flush=True)
        fidelity = Fidelity(inputs["images"], args.fidelity_count)
        meta["full_decode_psnr"] = fidelity.full_decode_psnr()
        meta["fidelity_count"] = len(fidelity.sample)
    if args.before is not None:
        meta["before"] = f"{args.before} at {git_revision_of(args.before)}"
    meta.update(revision=git_revision(), repeats=args.repeats, workers=args.workers,
                retries=args.retries,
                prepare_s=round(prep_s, 1))
    _, bench_s = timed(lambda: run_all(args, inputs, outcomes, fidelity))
    meta["benchmark_s"] = round(bench_s, 1)
    return render(info, meta, outcomes), {
        "machine": info, "meta": meta, "headline": headline(outcomes),
        "outcomes": outcomes_data(outcomes)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.one:
        child_main(args.one, args.job, args.result)
        return 0
    report, data = collect(args)
    publish("convert", report, data, data["meta"]["prepare_s"], data["meta"]["benchmark_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
