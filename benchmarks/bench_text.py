"""Token-loading throughput: datapipe's TokenLoader against the loaders people write today.

    .venv/bin/python -m benchmarks.bench_text [--corpus-mb 20] [--tokenizer wordpiece|bytes|PATH]
        [--max-tokens 16384] [--repeats 3] [--skip datasets,memmap,...]

One corpus of English-like documents, one a line, with a skewed (log-normal) length mix, is
tokenized once with one tokenizer, outside every timed part, into
  * a Hugging Face `datasets` Arrow dataset (`load_dataset("text")` + `.map(batched=True)`),
    read by a shuffled torch DataLoader with a pad-to-longest collate (DataCollatorWithPadding's
    recipe, plus the labels DataCollatorForLanguageModeling adds);
  * one flat uint16 `train.bin`, read the nanoGPT way: random 1024-token windows;
  * a datapipe dataset (`datapipe convert text --append-eos`), read by TokenLoader in the packed,
    padded and fixed layouts.

Every run is one epoch in a fresh Python process (imports not timed). Start-up is from
constructing the loader to holding its first batch; the epoch time runs from the end of
construction to the last batch. Runs of the loaders are interleaved so that slow drift of the
machine does not favour one. Then TokenLoader's epoch planning is timed on the same dataset at
token budgets from one that gives a million batches to 4096. Prints Markdown tables and saves
bench-results/text.md and .json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import (
    BENCH_DATA,
    announce_machine,
    build_once,
    cores,
    machine_line,
    markdown_table,
    median,
    publish,
    timed,
    verdict,
    warm_page_cache,
)
from benchmarks.fixtures import (
    CHILD_ENV,
    TOKENIZER_DIST,
    resolve_tokenizer,
    sentence,
    zipf_cumulative,
)
from benchmarks.runs import (
    Outcome,
    Record,
    busy_warning,
    check_skip,
    dist_absent,
    initial_outcome,
    outcomes_data,
    run_one,
    run_rounds,
    skip_names,
)

BLOCK = 1024  # nanoGPT's block_size, and the fixed layout's seq_len
PAD_MULTIPLE = 8  # padded layout: rows rounded up to a multiple of 8 (Tensor Cores)
IGNORE = -100
GOAL_VS_DATASETS = 10.0  # packed real tokens/s over the best `datasets` loader
GOAL_MEMMAP_RATIO = 2.0  # memmap tokens/s over packed real tokens/s, at most
GOAL_EFFICIENCY = {"packed": 0.999, "fixed": 0.97, "padded": 0.90}
PLAN_BUDGETS = (16, 256, 4096)  # max_tokens of the epoch-planning rows
PLAN_GOAL_BATCHES, PLAN_GOAL_S = 1_000_000, 1.0  # an epoch of a million batches planned in 1 s
# Linear: time per batch at the most batches, at most 2x that at the next most (which are at
# most a quarter as many: a quadratic planner's ratio is 4x or more). Judged on the fastest
# runs, the least disturbed by other work on the machine.
PLAN_LINEAR, PLAN_SPAN = 2.0, 4
# Document lengths in words: log-normal (median 120 words), clipped to [3, 2500]. The cap keeps
# every document of the bytes tokenizer under 16384 tokens, which layout="padded" needs.
MEDIAN_WORDS, SIGMA, MIN_WORDS, MAX_WORDS = 120, 1.1, 3, 2500


# ---------------------------------------------------------------- the corpus


def _document(rng: random.Random, cumulative: list[float]) -> str:
    words = round(min(MAX_WORDS, max(MIN_WORDS, rng.lognormvariate(math.log(MEDIAN_WORDS),
                                                                  SIGMA))))
    sentences, count = [], 0
    while count < words:
        sentences.append(sentence(rng, cumulative))
        count += sentences[-1].count(" ") + 1
    return " ".join(" ".join(sentences).split(" ")[:words])


def write_skewed_corpus(out: Path, megabytes: int, files: int = 4, seed: int = 0) -> None:
    """`files` .txt files, a document a line, log-normal lengths; same arguments, same bytes."""
    rng, cumulative = random.Random(seed), zipf_cumulative()
    per_file = megabytes * 1_000_000 // files
    for index in range(files):
        lines, size = [], 0
        while size < per_file:
            lines.append(_document(rng, cumulative))
            size += len(lines[-1]) + 1
        (out / f"corpus-{index:02d}.txt").write_text("\n".join(lines) + "\n")


def ensure_corpus(megabytes: int) -> Path:
    out = BENCH_DATA / f"text-skewed-{megabytes}MB"
    return build_once(out, f"writing a {megabytes} MB skewed text corpus in {out} ...",
                      lambda into: write_skewed_corpus(into, megabytes))


# ---------------------------------------------------------------- tokenized copies (untimed)


@dataclass
class Inputs:
    corpus: str
    corpus_bytes: int
    tokenizer: str  # "bytes" or a tokenizer.json path
    tokenizer_name: str
    datapipe: str  # dataset made by `datapipe convert text`
    memmap: str  # train.bin
    hf: str  # datasets.save_to_disk() directory, "" if not made
    documents: int
    tokens: int
    eos_id: int
    lengths: dict[str, float]
    prepare_s: dict[str, float]


def convert_datapipe(corpus: Path, tokenizer: str, out: Path) -> None:
    """The real CLI, as a user runs it."""
    argv = [sys.executable, "-m", "datapipe.cli", "convert", "text", str(corpus), str(out),
            "--tokenizer", tokenizer, "--append-eos", "--workers", str(cores()), "--overwrite"]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def build_memmap(dataset: Path, out: Path) -> None:
    """Every document's ids back to back in one uint16 file, as nanoGPT's prepare.py does."""
    import pyarrow as pa

    from datapipe.format.dataset import Dataset

    with Dataset(dataset) as ds:
        names = [shard.name for shard in ds.manifest.shards]
    tmp = out.with_suffix(".tmp")
    with open(tmp, "wb") as sink:
        for name in names:
            with pa.memory_map(str(dataset / name)) as source:
                tokens = pa.ipc.open_file(source).read_all().column("tokens")
                values = tokens.combine_chunks().flatten().to_numpy()
                sink.write(values.astype(np.uint16, copy=False).tobytes())
    tmp.replace(out)


def tokenize_hf(corpus: Path, tokenizer: str, eos_id: int, out: Path) -> None:
    """`load_dataset("text")` + `.map(batched=True)`, saved where the runs load it from."""
    import datasets

    datasets.disable_progress_bars()
    cache = out.with_name("hf-cache")
    files = sorted(str(p) for p in corpus.glob("*.txt"))
    data = datasets.load_dataset("text", data_files=files, split="train", cache_dir=str(cache))
    data = data.map(_hf_encoder(tokenizer, eos_id), batched=True, num_proc=cores(),
                    remove_columns=["text"])
    data.save_to_disk(str(out))
    shutil.rmtree(cache, ignore_errors=True)


def _hf_encoder(tokenizer: str, eos_id: int) -> Callable[[dict[str, list[str]]], dict[str, Any]]:
    """The same ids as `datapipe convert text --append-eos`: no special tokens, EOS at the end."""
    if tokenizer == "bytes":
        def encode_bytes(batch: dict[str, list[str]]) -> dict[str, Any]:
            return {"input_ids": [[*t.encode("utf-8"), eos_id] for t in batch["text"]]}

        return encode_bytes
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer)

    def encode(batch: dict[str, list[str]]) -> dict[str, Any]:
        encodings = tok.encode_batch(batch["text"], add_special_tokens=False)
        return {"input_ids": [[*e.ids, eos_id] for e in encodings]}

    return encode


def hf_token_count(path: Path) -> tuple[int, int]:
    import datasets
    import pyarrow.compute as pc

    data = datasets.load_from_disk(str(path))
    column = data.data.column("input_ids")
    return len(data), int(pc.sum(pc.list_value_length(column)).as_py())


def _step(work: Path, name: str, build: Callable[[Path], None], times: dict[str, float]) -> Path:
    """Build work/name once; a `.name.complete` marker says a build finished."""
    out, marker = work / name, work / f".{name}.complete"
    if not marker.exists():
        print(f"preparing {out} ...", flush=True)
        if out.is_dir():
            shutil.rmtree(out)
        _, times[name] = timed(lambda: build(out))
        marker.touch()
    return out


def length_stats(lengths: np.ndarray) -> dict[str, float]:
    p50, p90, p99 = np.percentile(lengths, [50, 90, 99])
    return {"mean": float(lengths.mean()), "min": int(lengths.min()), "p50": float(p50),
            "p90": float(p90), "p99": float(p99), "max": int(lengths.max())}


def prepare(args: argparse.Namespace, want_hf: bool) -> Inputs:
    corpus = ensure_corpus(args.corpus_mb)
    spec, name = resolve_tokenizer(args.tokenizer)
    work = BENCH_DATA / "bench-text" / f"{args.corpus_mb}MB-{name}"
    work.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}
    dp_dir = _step(work, "datapipe", lambda out: convert_datapipe(corpus, spec, out), times)
    bin_path = _step(work, "train.bin", lambda out: build_memmap(dp_dir, out), times)
    from datapipe.format.dataset import Dataset

    with Dataset(dp_dir) as ds:
        lengths = ds.scalar("length").astype(np.int64)
        eos_id = int(ds.manifest.tokenizer["eos_id"])
    hf_dir = _step(work, "hf", lambda out: tokenize_hf(corpus, spec, eos_id, out),
                   times) if want_hf else None
    if hf_dir is not None and hf_token_count(hf_dir) != (len(lengths), int(lengths.sum())):
        raise SystemExit(f"{hf_dir}: not the same documents and tokens as {dp_dir}")
    corpus_bytes = warm_page_cache(sorted(corpus.glob("*.txt")))
    return Inputs(str(corpus), corpus_bytes, spec, name, str(dp_dir), str(bin_path),
                  str(hf_dir or ""), len(lengths), int(lengths.sum()), eos_id,
                  length_stats(lengths), times)


# ---------------------------------------------------------------- the loaders (in the child)


@dataclass(frozen=True)
class Job:
    """What one measured run gets, passed to the child process as JSON."""

    data: str
    max_tokens: int
    workers: int = 0
    layout: str = ""
    batch_size: int = 0  # datasets: rows per batch
    tokens: int = 0  # memmap: tokens to draw, one epoch of the corpus
    seed: int = 0


Batch = dict[str, Any]
Counter = Callable[[Batch], tuple[int, int]]  # batch -> (real tokens, tokens computed)


def one_epoch(make: Callable[[], Iterable[Batch]], count: Counter) -> dict[str, Any]:
    """Construct a loader and drain one epoch, counting real and computed tokens."""
    start = time.perf_counter()
    loader = make()
    made = time.perf_counter()
    first, real, computed, batches = math.nan, 0, 0, 0
    for batch in loader:
        if not batches:
            first = time.perf_counter()
        r, c = count(batch)
        real, computed, batches = real + r, computed + c, batches + 1
    end = time.perf_counter()
    close = getattr(loader, "close", None)
    if close is not None:
        close()
    return {"startup_s": first - start, "epoch_s": end - made, "real_tokens": real,
            "computed_tokens": computed, "batches": batches}


def pad_collate(features: list[dict[str, list[int]]], pad_id: int = 0) -> Batch:
    """DataCollatorWithPadding's result (pad to the longest row, attention_mask), plus the
    labels of DataCollatorForLanguageModeling(mlm=False): input_ids with padding -100."""
    import torch

    lengths = [len(f["input_ids"]) for f in features]
    ids = torch.full((len(features), max(lengths)), pad_id, dtype=torch.int64)
    for row, feature in enumerate(features):
        ids[row, : lengths[row]] = torch.as_tensor(feature["input_ids"])
    mask = (torch.arange(ids.shape[1])[None, :] < torch.tensor(lengths)[:, None]).long()
    return {"input_ids": ids, "attention_mask": mask,
            "labels": ids.masked_fill(mask == 0, IGNORE), "num_real_tokens": sum(lengths)}


def run_datasets(job: Job) -> dict[str, Any]:
    import datasets
    import torch
    from torch.utils.data import DataLoader

    datasets.disable_progress_bars()

    def make() -> DataLoader:
        # Plain python lists, as the Trainer hands them to its collator.
        data = datasets.load_from_disk(job.data)
        return DataLoader(data, batch_size=job.batch_size, shuffle=True,
                          num_workers=job.workers, collate_fn=pad_collate,
                          generator=torch.Generator().manual_seed(job.seed))

    return one_epoch(make, lambda b: (b["num_real_tokens"], b["input_ids"].numel()))


def run_memmap(job: Job) -> dict[str, Any]:
    import torch

    rows = max(1, job.max_tokens // BLOCK)
    steps = -(-job.tokens // (rows * BLOCK))
    generator = torch.Generator().manual_seed(job.seed)

    def batches() -> Iterator[Batch]:
        for _ in range(steps):
            # nanoGPT's get_batch, which re-opens the memmap each batch to stop a memory leak.
            data = np.memmap(job.data, dtype=np.uint16, mode="r")
            ix = torch.randint(len(data) - BLOCK, (rows,), generator=generator)
            x = torch.stack([torch.from_numpy(data[i:i + BLOCK].astype(np.int64)) for i in ix])
            y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + BLOCK].astype(np.int64))
                             for i in ix])
            yield {"input_ids": x, "labels": y}

    return one_epoch(batches, lambda b: (b["input_ids"].numel(), b["input_ids"].numel()))


def _token_loader(job: Job) -> Any:
    import datapipe

    extra = {"padded": {"pad_to_multiple_of": PAD_MULTIPLE}, "fixed": {"seq_len": BLOCK}}
    return datapipe.TokenLoader(job.data, max_tokens=job.max_tokens, layout=job.layout,
                                shuffle=True, seed=job.seed, num_workers=job.workers,
                                **extra.get(job.layout, {}))


def run_datapipe(job: Job) -> dict[str, Any]:
    import datapipe.loader  # noqa: F401  (imported before the clock starts, as for the others)

    for cache in Path(job.data).glob(".datapipe-lengths-*.npy"):
        cache.unlink()  # so that the first construction builds the length cache
    start = time.perf_counter()
    with _token_loader(job) as cold:
        next(iter(cold))
    cold_s = time.perf_counter() - start
    loaders: list[Any] = []

    def make() -> Any:
        loaders.append(_token_loader(job))
        return loaders[-1]

    record = one_epoch(make, lambda b: (b["num_real_tokens"], b["input_ids"].numel()))
    return {**record, "startup_cold_s": cold_s, "loader_efficiency": loaders[0].efficiency}


RUNNERS: dict[str, Callable[[Job], dict[str, Any]]] = {
    "datasets": run_datasets, "memmap": run_memmap, "datapipe": run_datapipe}


# ---------------------------------------------------------------- epoch planning (here)


def planning_budgets(tokens: int) -> list[int]:
    """PLAN_BUDGETS and, if none gives PLAN_GOAL_BATCHES, first a smaller budget that does,
    small enough also for PLAN_SPAN times the batches of PLAN_BUDGETS[0]."""
    if tokens // PLAN_GOAL_BATCHES >= PLAN_BUDGETS[0]:
        return list(PLAN_BUDGETS)
    small = max(1, min(tokens // PLAN_GOAL_BATCHES, PLAN_BUDGETS[0] // PLAN_SPAN))
    return [small, *PLAN_BUDGETS]


def time_planning(dataset: str, max_tokens: int, repeats: int) -> dict[str, Any]:
    """TokenLoader planning an epoch (packed, one rank) as a pass begins: `len()` of an epoch
    not planned before, for `repeats` epochs (the work is the same for every epoch)."""
    import datapipe

    runs, batches = [], []
    with datapipe.TokenLoader(dataset, max_tokens=max_tokens) as loader:
        for epoch in range(repeats):
            loader.set_epoch(epoch)
            count, seconds = timed(lambda: len(loader))
            batches.append(count)
            runs.append(seconds)
    return {"max_tokens": max_tokens, "batches": batches[0], "runs_s": runs,
            "seconds": median(runs), "fastest_s": min(runs)}


def measure_planning(dataset: str, tokens: int, repeats: int) -> list[dict[str, Any]]:
    rows = []
    for max_tokens in planning_budgets(tokens):
        rows.append(time_planning(dataset, max_tokens, repeats))
        print(f"planning at max_tokens {max_tokens:,}: {rows[-1]['batches']:,} batches in "
              f"{rows[-1]['seconds']:.3f} s", flush=True)
    return rows


def per_million(row: dict[str, Any], seconds: str = "seconds") -> float:
    """Planning seconds per million batches (median, or with "fastest_s" the fastest run)."""
    return row[seconds] / max(1, row["batches"]) * 1e6


# ---------------------------------------------------------------- what is measured


@dataclass(frozen=True)
class Variant:
    name: str  # for --skip
    kind: str  # key of RUNNERS, also a --skip group
    label: str
    settings: str
    layout: str = ""
    workers: int = 0


VARIANTS = (
    Variant("datasets-w0", "datasets", "HF datasets + DataLoader", "pad to longest, workers 0",
            workers=0),
    Variant("datasets-w2", "datasets", "HF datasets + DataLoader", "pad to longest, workers 2",
            workers=2),
    Variant("memmap", "memmap", "nanoGPT flat memmap", f"random {BLOCK}-token windows"),
    Variant("packed", "datapipe", "datapipe TokenLoader", "packed", "packed"),
    Variant("padded", "datapipe", "datapipe TokenLoader", f"padded, multiple of {PAD_MULTIPLE}",
            "padded"),
    Variant("fixed", "datapipe", "datapipe TokenLoader", f"fixed, seq_len {BLOCK}", "fixed"),
)
VARIANTS_BY_NAME = {v.name: v for v in VARIANTS}


def make_job(variant: Variant, inputs: Inputs, max_tokens: int) -> Job:
    if variant.kind == "datasets":
        # Rows per batch so that the average batch holds max_tokens real tokens.
        rows = max(1, round(max_tokens / inputs.lengths["mean"]))
        return Job(inputs.hf, max_tokens, variant.workers, batch_size=rows)
    if variant.kind == "memmap":
        return Job(inputs.memmap, max_tokens, tokens=inputs.tokens)
    return Job(inputs.datapipe, max_tokens, variant.workers, variant.layout)


def child_main(kind: str, job_json: str, result_file: Path) -> None:
    import torch

    # One intra-op thread, as in DataLoader workers: with two, on a shared 2-core machine, the
    # pad collate's torch ops spin in OpenMP barriers and the same epoch takes 10x longer.
    torch.set_num_threads(1)
    result = RUNNERS[kind](Job(**json.loads(job_json)))
    result_file.write_text(json.dumps(result))


def run_all(args: argparse.Namespace, inputs: Inputs, outcomes: dict[str, Outcome]) -> None:
    """`args.repeats` rounds, each running every loader once, so drift spreads over all."""
    def attempt(name: str, run_dir: Path) -> Record:
        variant = VARIANTS_BY_NAME[name]
        job = make_job(variant, inputs, args.max_tokens)
        return run_one("benchmarks.bench_text", variant.kind, job, run_dir, CHILD_ENV)

    run_rounds(args.repeats, list(VARIANTS_BY_NAME), outcomes,
               BENCH_DATA / "bench-text" / "runs", args.settle, attempt, progress)


def progress(_: str, run: Record) -> str:
    return (f"{run['real_tokens'] / run['epoch_s'] / 1e6:.2f} M real tokens/s, "
            f"efficiency {run['real_tokens'] / run['computed_tokens']:.3f} "
            f"(other work: {run['others_cores']:.2f} cores)")


# ---------------------------------------------------------------- the report


def _median_of(outcome: Outcome, key: str) -> float:
    return median([r[key] for r in outcome.runs if key in r])


def real_rate(outcome: Outcome | None) -> float | None:
    """Real tokens per second over the median epoch time."""
    if outcome is None or outcome.status != "ok" or not outcome.runs:
        return None
    return outcome.runs[0]["real_tokens"] / _median_of(outcome, "epoch_s")


def efficiency(outcome: Outcome) -> float:
    run = outcome.runs[0]
    return run["real_tokens"] / run["computed_tokens"]


def best_datasets(outcomes: dict[str, Outcome]) -> tuple[str, float] | None:
    rates = [(v.name, real_rate(outcomes[v.name])) for v in VARIANTS if v.kind == "datasets"]
    rates = [(name, rate) for name, rate in rates if rate is not None]
    return max(rates, key=lambda item: item[1]) if rates else None


def goals(outcomes: dict[str, Outcome], planning: list[dict[str, Any]]) -> list[list[str]]:
    """[goal, measured, verdict] for each of the issue's goals that could be measured."""
    rows = []
    packed, base = real_rate(outcomes["packed"]), best_datasets(outcomes)
    if packed and base:
        ratio = packed / base[1]
        rows.append([f"packed ≥ {GOAL_VS_DATASETS:g}× datasets ({base[0]}) real tokens/s",
                     f"{ratio:.1f}×", verdict(ratio >= GOAL_VS_DATASETS)])
    memmap = real_rate(outcomes["memmap"])
    if packed and memmap:
        ratio = memmap / packed
        rows.append([f"memmap / packed ≤ {GOAL_MEMMAP_RATIO:g}", f"{ratio:.2f}",
                     verdict(ratio <= GOAL_MEMMAP_RATIO)])
    for name, floor in GOAL_EFFICIENCY.items():
        if real_rate(outcomes[name]) is not None:
            shown = "1.00" if name == "packed" else f"{floor:.2f}"
            value = efficiency(outcomes[name])
            rows.append([f"{name} padding efficiency ≥ {shown}", f"{value:.3f}",
                         verdict(value >= floor)])
    return rows + planning_goals(planning)


def planning_goals(planning: list[dict[str, Any]]) -> list[list[str]]:
    """Planning time per batch: low at the most batches, and no higher than with fewer."""
    most = sorted(planning, key=lambda row: -row["batches"])[:2]
    if not most:
        return []
    rows = [[f"epoch planning ≤ {PLAN_GOAL_S:g} s per {PLAN_GOAL_BATCHES:,} batches",
             f"{per_million(most[0]):.2f} s (at {most[0]['batches']:,} batches)",
             verdict(per_million(most[0]) <= PLAN_GOAL_S)]]
    if len(most) == 2:
        ratio = per_million(most[0], "fastest_s") / max(per_million(most[1], "fastest_s"),
                                                       1e-12)
        rows.append([f"epoch planning linear: time per batch at {most[0]['batches']:,} "
                     f"batches ≤ {PLAN_LINEAR:g}× that at {most[1]['batches']:,} (fastest "
                     f"runs; quadratic: {most[0]['batches'] / most[1]['batches']:.1f}×)",
                     f"{ratio:.2f}×", verdict(ratio <= PLAN_LINEAR)])
    return rows


def headline(goal_rows: list[list[str]]) -> str:
    if not goal_rows:
        return "**No goal could be measured (see the table).**"
    missed = [row for row in goal_rows if row[2] != "met"]
    parts = "; ".join(f"{goal}: {value} ({verdict})" for goal, value, verdict in goal_rows)
    summary = "all goals met" if not missed else f"{len(missed)} of {len(goal_rows)} goals NOT met"
    return f"**{summary.capitalize()}. {parts}.**"


def _startup(outcome: Outcome) -> tuple[str, str]:
    cold = _median_of(outcome, "startup_cold_s")
    warm = _median_of(outcome, "startup_s")
    return (f"{cold:.3f}" if not math.isnan(cold) else f"{warm:.3f}",
            f"{warm:.3f}" if not math.isnan(cold) else "–")


def table_rows(outcomes: dict[str, Outcome]) -> list[list[str]]:
    base = best_datasets(outcomes)
    rows = []
    for variant in VARIANTS:
        outcome = outcomes[variant.name]
        rate = real_rate(outcome)
        if rate is None:
            rows.append([variant.label, variant.settings, outcome.status, *[""] * 8])
            continue
        epochs = [r["epoch_s"] for r in outcome.runs]
        speedup = f"{rate / base[1]:.1f}×" if base else "–"
        rows.append([variant.label, variant.settings, f"{rate / 1e6:.2f}", speedup,
                     f"{efficiency(outcome):.3f}", *_startup(outcome),
                     f"{median(epochs):.2f}", " / ".join(f"{s:.2f}" for s in epochs),
                     f"{outcome.runs[0]['batches']:,}",
                     f"{max(r['others_cores'] for r in outcome.runs):.2f}"])
    return rows


def describe_corpus(inputs: Inputs) -> str:
    stats = inputs.lengths
    spread = ", ".join(f"{key} {stats[key]:,.0f}" for key in ("mean", "min", "p50", "p90",
                                                              "p99", "max"))
    where = "" if inputs.tokenizer == "bytes" else f" ({inputs.tokenizer})"
    return (f"Corpus: {inputs.corpus_bytes / 1e6:.1f} MB of English-like text, "
            f"{inputs.documents:,} documents (one a line) → {inputs.tokens:,} tokens with "
            f"{inputs.tokenizer_name}{where}, EOS appended. Document length in "
            f"tokens: {spread}.")


def render(info: dict[str, Any], meta: dict[str, Any], inputs: Inputs,
           outcomes: dict[str, Outcome], planning: list[dict[str, Any]]) -> str:
    goal_rows = goals(outcomes, planning)
    parts = [
        "# Token loading throughput", "", headline(goal_rows), "",
        markdown_table(["goal", "measured", "verdict"], goal_rows), "",
        f"Machine: {machine_line(info)}.", "", describe_corpus(inputs), "",
        f"Each figure: median of {meta['repeats']} one-epoch runs, each in a fresh process; "
        f"max_tokens {meta['max_tokens']:,}; the `datasets` batch size is "
        f"{meta['datasets_batch_size']} rows (max_tokens / mean length). Real tokens/s counts "
        "tokens of documents, not padding; efficiency = real / computed tokens (rows × "
        "width). Start-up: loader construction to first batch; for TokenLoader first with the "
        "length cache built, then read.", "",
        markdown_table(["loader", "settings", "real M tokens/s", "× datasets", "efficiency",
                        "start-up s", "start-up, cached s", "epoch s", "runs s", "batches",
                        "other work (cores)"], table_rows(outcomes)),
        "", *notes(meta, outcomes), *planning_section(meta, planning),
    ]
    return "\n".join(parts)


def planning_section(meta: dict[str, Any], planning: list[dict[str, Any]]) -> list[str]:
    if not planning:
        return []
    rows = [[f"{r['max_tokens']:,}", f"{r['batches']:,}", f"{r['seconds']:.3f}",
             " / ".join(f"{s:.3f}" for s in r["runs_s"]), f"{per_million(r):.2f}"]
            for r in planning]
    return ["", "## Epoch planning", "",
            "TokenLoader (packed, one rank) planning an epoch of the same dataset, as every "
            "pass begins: `len()` after `set_epoch` to an epoch not planned before, in this "
            f"process; median of {meta['repeats']} epochs.", "",
            markdown_table(["max_tokens", "batches", "planning s", "runs s",
                            "s per 1M batches"], rows)]


def notes(meta: dict[str, Any], outcomes: dict[str, Outcome]) -> list[str]:
    lines = [
        "Notes:", "",
        f"- The memmap loader's efficiency is 1.0 by construction, but its windows ignore "
        "document boundaries: a row runs across EOS into the next document with attention "
        "and positions continuing, sampling is with replacement (in one \"epoch\" some tokens "
        f"are drawn several times, others never), and it is {BLOCK}-token rows only.",
        "- `× datasets` is relative to the faster of the two `datasets` loaders. Their "
        "collate builds attention_mask and labels from input_ids alone (the mapped dataset "
        "holds no attention_mask column), which is less work than the Trainer's.",
        "- Every run uses one torch intra-op thread (as DataLoader workers do); with two, "
        "other work on the machine made the `datasets` collate's OpenMP threads spin and its "
        "epoch 10× slower.",
        "- Other engineers' jobs share this 2-core machine; the last column is the most CPU "
        "other processes used during any run of that loader (cores), so figures are noisy.",
    ]
    short = [v.name for v in VARIANTS if v.kind != "memmap" and real_rate(outcomes[v.name])
             and outcomes[v.name].runs[0]["real_tokens"] != meta["tokens"]]
    if short:  # every document-aware loader must hand out each corpus token exactly once
        lines.append(f"- Warning: {', '.join(short)} did not deliver the corpus's "
                     f"{meta['tokens']:,} tokens in its epoch; see bench-results/text.json.")
    warning = busy_warning(outcomes)
    if warning:
        lines.append(f"- {warning}")
    return lines


# ---------------------------------------------------------------- command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--corpus-mb", type=int, default=20, help="size of the generated corpus (20)")
    add("--tokenizer", default="wordpiece", help="'wordpiece' (the tokenizer.json of "
        f"{TOKENIZER_DIST}), 'bytes', or a tokenizer.json path (wordpiece)")
    add("--max-tokens", type=int, default=16384, help="token budget per batch (16384)")
    add("--repeats", type=int, default=3, help="epochs per loader; the median counts (3)")
    add("--settle", type=float, default=5.0, help="wait up to this many seconds for other "
        "work on the machine to stop before each run (5)")
    add("--skip", default="", help="comma-separated: " + ", ".join(VARIANTS_BY_NAME)
        + ", or a group: datasets, datapipe; planning: no epoch-planning table")
    add("--one", help=argparse.SUPPRESS)  # internal: measure one run in this process
    add("--job", help=argparse.SUPPRESS)
    add("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.corpus_mb, args.repeats) < 1 or args.max_tokens < BLOCK:
        parser.error(f"--corpus-mb and --repeats must be positive, --max-tokens >= {BLOCK}")
    check_skip(parser, args.skip, [*VARIANTS_BY_NAME, "datasets", "datapipe", "planning"])
    return args


def collect(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """Every tool measured as `args` say: the Markdown report and the results' data (machine,
    meta with prepare_s and benchmark_s, outcomes, ...). Shared by main and the suite."""
    for key, value in CHILD_ENV.items():  # `datasets` must not reach the Hub here either
        os.environ.setdefault(key, value)
    skip = skip_names(args.skip)
    outcomes = {v.name: initial_outcome((v.name, v.kind), skip,
                                        ("datasets",) if v.kind == "datasets" else (),
                                        dist_absent) for v in VARIANTS}
    info = announce_machine()
    want_hf = any(outcomes[v.name].status == "ok" for v in VARIANTS if v.kind == "datasets")
    inputs, prep_s = timed(lambda: prepare(args, want_hf))
    _, bench_s = timed(lambda: run_all(args, inputs, outcomes))
    planning = [] if "planning" in skip else measure_planning(inputs.datapipe, inputs.tokens,
                                                              args.repeats)
    meta = {"repeats": args.repeats, "max_tokens": args.max_tokens, "tokens": inputs.tokens,
            "prepare_s": round(prep_s, 1),
            "benchmark_s": round(bench_s, 1),
            "datasets_batch_size": make_job(VARIANTS[0], inputs, args.max_tokens).batch_size}
    goal_rows = goals(outcomes, planning)
    return render(info, meta, inputs, outcomes, planning), {
        "machine": info, "meta": meta, "inputs": asdict(inputs),
        "headline": headline(goal_rows), "goals": goal_rows,
        "outcomes": outcomes_data(outcomes), "planning": planning}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.one:
        child_main(args.one, args.job, args.result)
        return 0
    report, data = collect(args)
    publish("text", report, data, data["meta"]["prepare_s"], data["meta"]["benchmark_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
