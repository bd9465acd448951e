"""`datapipe bench --suite images|text|convert|gpu|all`: every peer side by side, one command.

Each suite runs the benchmark scripts' own collect() (bench_loader, bench_text, bench_convert,
bench_gpu + bench_handoff) on the same source data, the same job and worker count, in
repeated rounds of fresh processes; their progress lines show each run's figure as it ends.
The figures are then gathered into panels (one table and one chart each), and written to OUT:
suite.json (the machine, every run of every tool raw and summarised, each script's own data),
suite.md (the answer first, then the tables and charts), one PNG per panel, and each script's
own detailed report (loader.md, text.md, ...). With `readme`, the PNGs also go to docs/bench/
and README.md's marked region is rewritten from these figures and, for the suites not run,
those recorded in docs/bench/results.json by an earlier run (so the GPU suite can be run on a
GPU machine alone).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks import (
    bench_convert,
    bench_gpu,
    bench_handoff,
    bench_loader,
    bench_text,
    ffcv_peer,
)
from benchmarks.common import REPO, cores, git_revision, installed, machine, write_results
from benchmarks.suite_charts import draw
from benchmarks.suite_report import (
    Entry,
    Panel,
    Section,
    readme_report,
    report,
    update_readme,
)
from datapipe.errors import ArgumentError

SUITES = ("images", "text", "convert", "gpu")
NO_CUDA = "skipped: no CUDA device"
README_CHARTS = REPO / "docs" / "bench"
# Distributions whose versions the report names: the peers, and what every tool stands on.
VERSIONS = {"torch": ("torch",), "pillow-simd": ("pillow-simd",), "pillow": ("pillow",),
            "pyarrow": ("pyarrow",), "numpy": ("numpy",),
            "DALI": ("nvidia-dali-cuda130", "nvidia-dali-cuda120"), "kornia": ("kornia",),
            "webdataset": ("webdataset",), "litdata": ("litdata",), "datasets": ("datasets",),
            "tokenizers": ("tokenizers",), "datapipe": ("datapipe",)}


@dataclass(frozen=True)
class Options:
    suites: tuple[str, ...]
    repeats: int = 3
    photos: int = 2000
    text_mb: int = 20
    workers: int = 0  # 0: all cores
    out: Path = REPO / "bench-results"
    smoke: bool = False  # tiny data, one repetition, no waiting for a quiet machine
    readme: bool = False

    @classmethod
    def smoke_test(cls, suites: tuple[str, ...], out: Path, workers: int = 2) -> Options:
        # Enough photos that every worker's share fills a batch of 16 (WebDataset's shards
        # are split by worker, and the loaders check a full first batch).
        return cls(suites, repeats=1, photos=max(48, 32 * workers), text_mb=1, workers=workers,
                   out=out, smoke=True)


# ---------------------------------------------------------------- what each script is asked


def common_args(opts: Options) -> list[str]:
    settle = ["--settle", "0"] if opts.smoke else []
    return ["--repeats", str(opts.repeats), *settle]


def loader_args(opts: Options) -> list[str]:
    smoke = ["--batch-size", "16", "--warmup", "0", "--epochs", "1"] if opts.smoke else []
    return [*common_args(opts), "--count", str(opts.photos), "--workers", str(opts.workers),
            *smoke]


def text_args(opts: Options) -> list[str]:
    # Smoke: one variant per tool (the other layouts and worker counts have their own tests).
    smoke = ["--skip", "datasets-w0,padded,fixed"] if opts.smoke else []
    return [*common_args(opts), "--corpus-mb", str(opts.text_mb), *smoke]


def convert_args(opts: Options) -> list[str]:
    smoke = ["--fidelity-count", "4", "--retries", "0", "--skip", "datapipe-text-bytes"] \
        if opts.smoke else []
    return [*common_args(opts), "--count", str(opts.photos), "--workers", str(opts.workers),
            "--text-mb", str(opts.text_mb), *smoke]


def gpu_args(opts: Options) -> list[str]:
    smoke = ["--batches", "3", "--batch-size", "16"] if opts.smoke else []
    return [*common_args(opts), "--count", str(opts.photos), "--workers", str(opts.workers),
            *smoke]


def handoff_args(opts: Options) -> list[str]:
    smoke = ["--batches", "3", "--batch-size", "16", "--rate-batch", "16", "--epochs", "1",
             "--wait", "0.1"] if opts.smoke else []
    return [*common_args(opts), "--count", str(opts.photos), "--workers", str(opts.workers),
            *smoke]


# ---------------------------------------------------------------- scripts' data -> panels


def entries(outcomes: dict[str, dict[str, Any]], labels: dict[str, str],
            figure: Callable[[str, dict[str, Any]], float], ours: Callable[[str], bool],
            reference: frozenset[str] = frozenset()) -> list[Entry]:
    """One entry per tool of a script's outcomes (those it did not run for want of an option
    stay out), each run's figure taken by figure(name, record)."""
    out = []
    for name, outcome in outcomes.items():
        if outcome["status"].startswith("not run"):
            continue
        values = [figure(name, r) for r in outcome["runs"]]
        out.append(Entry(name, labels.get(name, name), outcome["status"], values, ours(name),
                         name in reference))
    return out


def is_datapipe(name: str) -> bool:
    return name.startswith("datapipe")


def image_panels(data: dict[str, Any]) -> list[Panel]:
    meta = data["meta"]
    labels = {p.name: p.label for p in bench_loader.PEERS}
    job = (f"{meta['photos']['count']} JPEG photos → random-resized crop {bench_loader.CROP} + "
           f"flip → uint8 batches of {meta['batch']}, {meta['workers']} workers, "
           f"{meta['epochs']} measured epoch(s) per run.")
    return [Panel("images", "Image loading", "images/s",
                  entries(data["outcomes"], labels, lambda _, r: r["rate"], is_datapipe,
                          frozenset({"ceiling"})), "datapipe", "torch", job=job)]


def text_panels(data: dict[str, Any]) -> list[Panel]:
    labels = {v.name: f"{v.label} ({v.settings})" for v in bench_text.VARIANTS}
    ours = {v.name for v in bench_text.VARIANTS if v.kind == "datapipe"}
    job = (f"{data['inputs']['tokens']:,} tokens in {data['inputs']['documents']:,} documents, "
           f"token budget {data['meta']['max_tokens']:,} per batch, one epoch per run.")
    return [Panel("text", "Token loading", "real tokens/s",
                  entries(data["outcomes"], labels,
                          lambda _, r: r["real_tokens"] / r["epoch_s"], ours.__contains__),
                  "packed", "datasets-w2", job=job), *planning_panels(data)]


def planning_panels(data: dict[str, Any]) -> list[Panel]:
    """TokenLoader's epoch planning per million batches at each token budget: flat when it is
    linear in the batches. The answer leads with the budget that gives the most batches."""
    rows = sorted(data.get("planning") or [], key=lambda row: -row["batches"])
    if not rows:
        return []
    planned = [Entry(f"plan-{r['max_tokens']}",
                     f"max_tokens {r['max_tokens']:,} ({r['batches']:,} batches)", "ok",
                     [s / max(1, r["batches"]) * 1e6 for s in r["runs_s"]], ours=True)
               for r in rows]
    return [Panel("text-planning", "TokenLoader epoch planning", "s per 1M batches", planned,
                  planned[0].name, higher_is_better=False,
                  job="packed, one rank: `len()` of an epoch not planned before, the suite's "
                  "corpus at each token budget.")]


def convert_panels(data: dict[str, Any]) -> list[Panel]:
    labels = {p.name: p.label + (f" ({p.tokenizer})" if p.tokenizer else "")
              for p in bench_convert.PEERS}
    kinds = {p.name: p.kind for p in bench_convert.PEERS}

    def of(kind: str) -> dict[str, dict[str, Any]]:
        return {n: o for n, o in data["outcomes"].items() if kinds.get(n) == kind}

    workers = f"{data['meta']['workers']} workers, import and start-up included."
    return [
        Panel("convert-images", "Converting images", "images/s",
              entries(of("images"), labels, lambda _, r: r["items"] / r["seconds"],
                      is_datapipe), "datapipe", "litdata",
              job=f"{data['meta']['photos']['count']} photos → shorter side "
              f"{bench_convert.SHORT_SIDE}, JPEG q{bench_convert.QUALITY}; {workers}"),
        Panel("convert-text", "Tokenizing text", "tokens/s",
              entries(of("text"), labels, lambda _, r: r["tokens"] / r["seconds"],
                      is_datapipe), "datapipe-text-wordpiece", "datasets",
              job=f"{data['meta'].get('text', {}).get('megabytes', 0):.0f} MB of text; "
              f"{workers}"),
    ]


def gpu_panels(gpu: dict[str, Any], handoff: dict[str, Any]) -> list[Panel]:
    loaders = {n: o for n, o in gpu["outcomes"].items() if n in bench_gpu.LOADERS}
    labels = {"dali": 'datapipe Loader, decode="dali" (nvJPEG)',
              "cpu": 'datapipe Loader, decode="cpu", device="cuda"'}
    paths = {p.name: p.label for p in bench_handoff.PATHS}
    handoffs = {n: o for n, o in handoff["outcomes"].items() if n in bench_handoff.HANDOFF}
    return [
        Panel("gpu", "Loading onto the GPU", "images/s",
              entries(loaders, labels, lambda _, r: r["images_per_s"], lambda _: True),
              "dali", "cpu"),
        Panel("handoff", "Training-thread CPU per next()", "ms",
              entries(handoffs, paths, lambda _, r: r["cpu"]["median"], lambda _: True),
              "cuda", higher_is_better=False),
    ]


def skipped_gpu_panel() -> Panel:
    return Panel("gpu", "Loading onto the GPU", "images/s",
                 [Entry("gpu", "bench_gpu and bench_handoff", NO_CUDA)])


# ---------------------------------------------------------------- running


def run_script(module: Any, argv: list[str], stem: str, out: Path,
               scripts: dict[str, Any]) -> dict[str, Any]:
    """The script's collect() on `argv`; its own report lands in OUT/STEM.md and .json."""
    print(f"== {stem}: {module.__name__} {' '.join(argv)}", flush=True)
    text, data = module.collect(module.parse_args(argv))
    write_results(stem, text, data, out)
    scripts[stem] = data
    return data


def run_suite(name: str, opts: Options, scripts: dict[str, Any]) -> list[Panel]:
    out = opts.out
    if name == "images":
        return image_panels(run_script(bench_loader, loader_args(opts), "loader", out, scripts))
    if name == "text":
        return text_panels(run_script(bench_text, text_args(opts), "text", out, scripts))
    if name == "convert":
        return convert_panels(run_script(bench_convert, convert_args(opts), "convert", out,
                                         scripts))
    if not bench_gpu.cuda_available():
        print(f"== gpu: {NO_CUDA}", flush=True)
        return [skipped_gpu_panel()]
    return gpu_panels(run_script(bench_gpu, gpu_args(opts), "gpu", out, scripts),
                      run_script(bench_handoff, handoff_args(opts), "handoff", out, scripts))


def describe_machine() -> dict[str, Any]:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    versions = {label: next(filter(None, map(installed, dists)), None)
                for label, dists in VERSIONS.items()}
    versions["ffcv"] = ffcv_peer.version()  # in its own venv
    return {**machine(), "gpu": gpu, "versions": versions, "platform": platform.platform(),
            "date": datetime.date.today().isoformat(), "revision": git_revision()}


def settings_line(opts: Options) -> str:
    size = "smoke-test sizes" if opts.smoke else f"{opts.photos} photos, {opts.text_mb} MB text"
    return (f"Each figure: median of {opts.repeats} run(s), each a fresh process; spread = "
            f"slowest–fastest run. {size}, {opts.workers} workers. Per-script details: "
            "loader.md, text.md, convert.md, gpu.md, handoff.md beside this report.")


def run(opts: Options) -> int:
    """Run the suites, write OUT/suite.{md,json} and the charts; 1 if a datapipe tool failed."""
    if opts.workers < 1:
        opts = replace(opts, workers=cores())
    opts.out.mkdir(parents=True, exist_ok=True)
    info = describe_machine()
    print(f"Machine: {info['cpu']}, {info['cores']} cores, GPU: {info['gpu']}", flush=True)
    scripts: dict[str, Any] = {}
    suites = {name: run_suite(name, opts, scripts) for name in opts.suites}
    publish(info, suites, scripts, opts)
    failed = [e.label for ps in suites.values() for p in ps for e in p.entries
              if e.ours and e.status.startswith("failed")]
    for label in failed:
        print(f"datapipe failed: {label}", flush=True)
    return 1 if failed else 0


def publish(info: dict[str, Any], suites: dict[str, list[Panel]], scripts: dict[str, Any],
            opts: Options) -> None:
    charts = {p.key: f"{p.key}.png" for ps in suites.values() for p in ps
              if draw(p, info, opts.out / f"{p.key}.png")}
    text = report(info, suites, charts, settings_line(opts))
    (opts.out / "suite.md").write_text(text)
    (opts.out / "suite.json").write_text(json.dumps({
        "machine": info, "options": {**asdict(opts), "out": str(opts.out)},
        "suites": {n: [p.data() for p in ps] for n, ps in suites.items()},
        "scripts": scripts}, indent=2) + "\n")
    print("\n" + text + f"\nsaved {opts.out / 'suite.md'}, suite.json and "
          f"{len(charts)} chart(s)", flush=True)
    if opts.readme:
        write_readme(info, suites, opts)


def write_readme(info: dict[str, Any], suites: dict[str, list[Panel]], opts: Options,
                 readme: Path = REPO / "README.md", charts_dir: Path = README_CHARTS) -> None:
    """The README's region from these suites' results and, for the suites not run now, those
    an earlier `--readme` run recorded in CHARTS_DIR/results.json: the GPU figures can come
    from a GPU machine and the rest from another, each with its machine named. A GPU suite
    that found no CUDA device keeps the GPU figures recorded before it."""
    charts_dir.mkdir(parents=True, exist_ok=True)
    record = charts_dir / "results.json"
    sections = load_sections(record)
    for name, panels in suites.items():
        if name == "gpu" and panels[0].entries[0].status == NO_CUDA and name in sections:
            print("== gpu: no CUDA device here; the README keeps the GPU figures of "
                  f"{sections[name].machine['date']} ({sections[name].machine['gpu']})",
                  flush=True)
            continue
        sections[name] = Section(info, settings_line(opts), panels)
        for panel in panels:
            draw(panel, info, charts_dir / f"{panel.key}.png")
    ordered = {name: sections[name] for name in SUITES if name in sections}
    record.write_text(json.dumps({n: s.data() for n, s in ordered.items()}, indent=2) + "\n")
    prefix = Path(os.path.relpath(charts_dir, readme.parent)).as_posix()
    charts = {p.key: f"{prefix}/{p.key}.png" for s in ordered.values() for p in s.panels
              if (charts_dir / f"{p.key}.png").is_file()}
    update_readme(readme, readme_report(ordered, charts))
    print(f"{readme}'s benchmark region and {charts_dir} updated", flush=True)


def load_sections(record: Path) -> dict[str, Section]:
    """The suites' results an earlier `--readme` run recorded (none if there is no record)."""
    try:
        data = json.loads(record.read_text())
        return {name: Section.from_data(section) for name, section in data.items()}
    except FileNotFoundError:
        return {}
    except (ValueError, KeyError, TypeError) as exc:
        raise ArgumentError(f"{record}: not a record of benchmark results ({exc}); delete it "
                            "and rerun with --suite all --readme") from None
