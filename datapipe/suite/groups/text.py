"""Token loading: TokenLoader against the loaders people write today (text_peers), one epoch a
run on a corpus of skewed document lengths tokenized once (wordpiece) into each tool's form;
after the rounds, TokenLoader's epoch planning timed here at budgets up to a million batches."""

from __future__ import annotations

import inspect
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from datapipe.suite.fixtures import build_once, warm_page_cache
from datapipe.suite.groups import text_packing
from datapipe.suite.groups import text_peers as tp
from datapipe.suite.options import Options
from datapipe.suite.report import Entry, Panel, markdown_table
from datapipe.suite.runner import CHILD_ENV, Group, GroupResult, Outcome, Peer, Record, timed

MAX_TOKENS = 16384  # token budget per batch
GOAL_VS_DATASETS = 10.0  # packed real tokens/s over the best `datasets` loader
GOAL_MEMMAP_RATIO = 2.0  # memmap tokens/s over packed real tokens/s, at most
GOAL_EFFICIENCY = {"packed": 0.999, "fixed": 0.97, "padded": 0.90}
GOAL_PRESET_VS_PACKED = 0.9  # the "hf" preset's tokens/s over the packed layout's, at least
GOAL_PRESET_VS_FLATTENING = 10.0  # ... and over HF's DataCollatorWithFlattening + DataLoader
PLAN_BUDGETS = (16, 256, 4096)  # max_tokens of the epoch-planning rows
PLAN_GOAL_BATCHES, PLAN_GOAL_S = 1_000_000, 1.0  # an epoch of a million batches planned in 1 s
# Linear: time per batch at the most batches at most 2x that at the next most (at most a
# quarter as many: a quadratic planner's ratio is 4x or more), judged on the fastest runs.
PLAN_LINEAR, PLAN_SPAN = 2.0, 4
SMOKE_SKIP = ("datasets-w0", "padded", "fixed")  # one variant per tool; the rest have tests
HF_COPY_READERS = ("datasets", "flattening")  # the peers that read the `datasets` copy


def peer(name: str, label: str, run: Callable[..., Record], tag: str, **settings: Any) -> Peer:
    modules = {"datasets": ("torch", "datasets"),
               "flattening": ("torch", "datasets", "transformers")}.get(tag, ("torch",))
    return Peer(name, label, tp.one_thread(run, **settings), modules, ours=tag == "datapipe",
                tag=tag)


class TextGroup(Group):
    name, title, report = "text", "Token loading", "text"
    job_type = tp.Job
    peers = (
        peer("datasets-w0", "HF datasets + DataLoader (pad to longest, workers 0)",
             tp.run_datasets, "datasets", workers=0),
        peer("datasets-w2", "HF datasets + DataLoader (pad to longest, workers 2)",
             tp.run_datasets, "datasets", workers=2),
        peer("memmap", f"nanoGPT flat memmap (random {tp.BLOCK}-token windows)", tp.run_memmap,
             "memmap"),
        peer("packed", "datapipe TokenLoader (packed)", tp.run_datapipe, "datapipe",
             layout="packed"),
        peer("padded", f"datapipe TokenLoader (padded, multiple of {tp.PAD_MULTIPLE})",
             tp.run_datapipe, "datapipe", layout="padded"),
        peer("fixed", f"datapipe TokenLoader (fixed, seq_len {tp.BLOCK})", tp.run_datapipe,
             "datapipe", layout="fixed"),
        peer("flattening", "HF DataCollatorWithFlattening + DataLoader (workers 2)",
             tp.run_hf_flattening, "flattening", workers=2),
        peer("hf-preset", 'datapipe TokenLoader (preset="hf")', tp.run_datapipe, "datapipe",
             preset="hf"),
    )

    def prepare(self, opts: Options, outcomes: dict[str, Outcome]) -> dict[str, Any]:
        """The corpus and its tokenized copies, each made once under DATA; the `datasets` copy
        only for a `datasets` peer still in the running, whose readers fail unless it holds
        the documents and tokens of datapipe's."""
        import numpy as np

        import datapipe
        from datapipe.format.dataset import Dataset

        for name in outcomes if opts.smoke else ():
            if name.removesuffix("-before") in SMOKE_SKIP:
                outcomes[name].status = "skipped"
        for key, value in CHILD_ENV.items():  # `datasets` must not reach the Hub here either
            os.environ.setdefault(key, value)
        workers = opts.workers
        corpus, spec, tokenizer, dp = tp.suite_dataset(opts.data, opts.text_mb, workers)
        work = dp.parent
        memmap = build_once(work / "memmap", "writing train.bin ...",
                            lambda out: tp.build_memmap(dp, out / "train.bin")) / "train.bin"
        with Dataset(dp) as ds:
            lengths = ds.scalar("length").astype(np.int64)
            eos_id = int(ds.manifest.tokenizer["eos_id"])
        if outcomes["hf-preset"].status == "ok" and \
                "preset" not in inspect.signature(datapipe.TokenLoader).parameters:
            outcomes["hf-preset"].status = "skipped: this datapipe's TokenLoader has no preset="
        readers = [p.name for p in self.peers if p.tag in HF_COPY_READERS]
        hf = ""
        if any(outcomes[name].status == "ok" for name in readers):
            hf = str(tp.hf_copy(corpus, spec, dp, workers))
            if tp.hf_counts(Path(hf)) != (len(lengths), int(lengths.sum())):
                for name in readers:
                    outcomes[name].status = f"failed: {hf}: not the documents and tokens of {dp}"
        stats = dict(zip(("mean", "min", "p50", "p90", "p99", "max"), map(float, [
            lengths.mean(), *np.percentile(lengths, [0, 50, 90, 99, 100])]), strict=True))
        return {"corpus": str(corpus), "corpus_bytes": warm_page_cache(corpus.glob("*.txt")),
                "tokenizer": spec, "tokenizer_name": tokenizer, "datapipe": str(dp),
                "memmap": str(memmap), "hf": hf, "documents": len(lengths),
                "tokens": int(lengths.sum()), "eos_id": eos_id, "lengths": stats,
                "max_tokens": MAX_TOKENS, "repeats": opts.repeats,
                # `datasets` rows per batch: the average batch holds max_tokens real tokens.
                "datasets_batch_size": max(1, round(MAX_TOKENS / stats["mean"]))}

    def job(self, peer: Peer, meta: dict[str, Any], opts: Options, run_dir: Path) -> tp.Job:
        return tp.Job(meta["hf" if peer.tag in HF_COPY_READERS else peer.tag], meta["max_tokens"],
                      meta["datasets_batch_size"], meta["tokens"])

    def progress(self, peer: Peer, run: Record) -> str:
        return (f"{run['real_tokens'] / run['epoch_s'] / 1e6:.2f} M real tokens/s, "
                f"efficiency {run['real_tokens'] / run['computed_tokens']:.3f} "
                f"(other work: {run['others_cores']:.2f} cores)")

    def after(self, opts: Options, meta: dict[str, Any], outcomes: dict[str, Outcome]) -> None:
        meta["planning"] = [time_planning(meta["datapipe"], max_tokens, opts.repeats)
                            for max_tokens in planning_budgets(meta["tokens"])]
        meta["packing"] = text_packing.measure(meta)

    def panels(self, result: GroupResult) -> list[Panel]:
        meta, outcomes = result.meta, result.outcomes
        entries = [Entry(p.name, p.label, outcomes[p.name].status,
                         [r["real_tokens"] / r["epoch_s"] for r in outcomes[p.name].runs],
                         p.ours, p.reference) for p in result.peers]
        return [Panel("text", self.title, "real tokens/s", entries, "packed", "datasets-w2",
                      job=f"{meta['tokens']:,} tokens in {meta['documents']:,} documents, "
                      f"token budget {meta['max_tokens']:,} per batch, one epoch per run."),
                *planning_panels(meta.get("planning") or []),
                *text_packing.panel(meta.get("packing") or {}, meta["tokens"])]

    def details(self, result: GroupResult) -> list[str]:
        meta, goal_rows = result.meta, goals(result)
        spread = ", ".join(f"{key} {value:,.0f}" for key, value in meta["lengths"].items())
        short = [p.name for p in result.peers if p.tag != "memmap" and real_rate(result, p.name)
                 and result.outcomes[p.name].runs[0]["real_tokens"] != meta["tokens"]]
        return [
            headline(goal_rows), "", markdown_table(["goal", "measured", "verdict"], goal_rows),
            "", f"Corpus: {meta['corpus_bytes'] / 1e6:.1f} MB of English-like text, "
            f"{meta['documents']:,} documents (one a line) → {meta['tokens']:,} tokens with "
            f"{meta['tokenizer_name']} ({meta['tokenizer']}), EOS appended. Document length in "
            f"tokens: {spread}.", "",
            f"Each figure: median of {meta['repeats']} one-epoch runs, each in a fresh process; "
            f"max_tokens {meta['max_tokens']:,}; `datasets` batches of "
            f"{meta['datasets_batch_size']} rows (max_tokens / mean length). Real tokens/s "
            "counts tokens of documents, not padding; efficiency = real / computed tokens (rows "
            "× width). Start-up: loader construction to first batch; for TokenLoader first with "
            "the length cache built, then read. Other work: the most cores other processes used "
            "during any run of that loader.", "",
            markdown_table(["loader", "real M tokens/s", "× datasets", "efficiency",
                            "start-up s", "start-up, cached s", "epoch s", "runs s", "batches",
                            "other work (cores)"], table_rows(result)), "",
            "- memmap: efficiency 1.0 by construction, but rows run across EOS into the next "
            "document (attention and positions continuing), windows are drawn with replacement "
            f"(in an \"epoch\" some tokens twice, others never), {tp.BLOCK}-token rows only.",
            "- `× datasets`: over the faster `datasets` loader, whose collate builds "
            "attention_mask and labels from input_ids alone: less work than the Trainer's.",
            "- Every run uses one torch thread, as DataLoader workers do (with two, other work "
            "made the `datasets` collate's OpenMP threads spin: epochs 10× slower).",
            *([f"- Warning: {', '.join(short)} did not deliver the corpus's {meta['tokens']:,} "
               "tokens in its epoch; see text.json."] if short else []),
            "- Epoch planning: TokenLoader's `len()` after `set_epoch` to an epoch not planned "
            f"before, in this process, {meta['repeats']} epoch(s) at each budget; the seconds of "
            "each run are in text.json."]


GROUP = TextGroup()


# ---------------------------------------------------------------- epoch planning (here)


def planning_budgets(tokens: int) -> list[int]:
    """PLAN_BUDGETS and, if none gives PLAN_GOAL_BATCHES, first a smaller budget that does,
    small enough also for PLAN_SPAN times the batches of PLAN_BUDGETS[0]."""
    if tokens // PLAN_GOAL_BATCHES >= PLAN_BUDGETS[0]:
        return list(PLAN_BUDGETS)
    return [max(1, min(tokens // PLAN_GOAL_BATCHES, PLAN_BUDGETS[0] // PLAN_SPAN)), *PLAN_BUDGETS]


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
    row = {"max_tokens": max_tokens, "batches": batches[0], "runs_s": runs,
           "seconds": statistics.median(runs), "fastest_s": min(runs)}
    print(f"planning at max_tokens {max_tokens:,}: {row['batches']:,} batches in "
          f"{row['seconds']:.3f} s", flush=True)
    return row


def per_million(row: dict[str, Any], seconds: str = "seconds") -> float:
    """Planning seconds per million batches (median, or with "fastest_s" the fastest run)."""
    return row[seconds] / max(1, row["batches"]) * 1e6


def planning_panels(planning: list[dict[str, Any]]) -> list[Panel]:
    """TokenLoader's epoch planning per million batches at each token budget: flat when it is
    linear in the batches. The answer leads with the budget that gives the most batches."""
    planned = [Entry(f"plan-{r['max_tokens']}",
                     f"max_tokens {r['max_tokens']:,} ({r['batches']:,} batches)", "ok",
                     [s / max(1, r["batches"]) * 1e6 for s in r["runs_s"]], ours=True)
               for r in sorted(planning, key=lambda row: -row["batches"])]
    return [Panel("text-planning", "TokenLoader epoch planning", "s per 1M batches", planned,
                  planned[0].name, higher_is_better=False,
                  job="packed, one rank: `len()` of an epoch not planned before, the suite's "
                  "corpus at each token budget.")] if planned else []


# ---------------------------------------------------------------- goals and the table


def real_rate(result: GroupResult, name: str) -> float | None:
    """Real tokens per second over the median epoch time; None if `name` did not run."""
    epoch = result.median(name, "epoch_s")
    return result.outcomes[name].runs[0]["real_tokens"] / epoch if epoch else None


def efficiency(result: GroupResult, name: str) -> float:
    run = result.outcomes[name].runs[0]
    return run["real_tokens"] / run["computed_tokens"]


def best_datasets(result: GroupResult) -> tuple[str, float] | None:
    rates = [(p.name, real_rate(result, p.name)) for p in result.peers if p.tag == "datasets"]
    return max(((n, r) for n, r in rates if r), key=lambda item: item[1], default=None)


def goals(result: GroupResult) -> list[list[str]]:
    """[goal, measured, verdict] for each goal that could be measured."""
    rows: list[list[str]] = []

    def add(goal: str, value: str, ok: bool) -> None:
        rows.append([goal, value, "met" if ok else "NOT met"])

    packed, memmap, base = real_rate(result, "packed"), real_rate(result, "memmap"), \
        best_datasets(result)
    if packed and base:
        add(f"packed ≥ {GOAL_VS_DATASETS:g}× datasets ({base[0]}) real tokens/s",
            f"{packed / base[1]:.1f}×", packed / base[1] >= GOAL_VS_DATASETS)
    if packed and memmap:
        add(f"memmap / packed ≤ {GOAL_MEMMAP_RATIO:g}", f"{memmap / packed:.2f}",
            memmap / packed <= GOAL_MEMMAP_RATIO)
    preset, flattening = real_rate(result, "hf-preset"), real_rate(result, "flattening")
    if preset and packed:
        add(f'preset="hf" ≥ {GOAL_PRESET_VS_PACKED:g}× packed real tokens/s',
            f"{preset / packed:.2f}×", preset / packed >= GOAL_PRESET_VS_PACKED)
    if preset and flattening:
        add(f'preset="hf" ≥ {GOAL_PRESET_VS_FLATTENING:g}× DataCollatorWithFlattening',
            f"{preset / flattening:.1f}×", preset / flattening >= GOAL_PRESET_VS_FLATTENING)
    for name, floor in GOAL_EFFICIENCY.items():
        if real_rate(result, name) is not None:
            add(f"{name} padding efficiency ≥ {'1.00' if name == 'packed' else f'{floor:.2f}'}",
                f"{efficiency(result, name):.3f}", efficiency(result, name) >= floor)
    # Planning time per batch: low at the most batches, and no higher than with fewer.
    most = sorted(result.meta.get("planning") or [], key=lambda row: -row["batches"])[:2]
    if most:
        add(f"epoch planning ≤ {PLAN_GOAL_S:g} s per {PLAN_GOAL_BATCHES:,} batches",
            f"{per_million(most[0]):.2f} s (at {most[0]['batches']:,} batches)",
            per_million(most[0]) <= PLAN_GOAL_S)
    if len(most) == 2:
        ratio = per_million(most[0], "fastest_s") / max(per_million(most[1], "fastest_s"), 1e-12)
        add(f"epoch planning linear: time per batch at {most[0]['batches']:,} batches ≤ "
            f"{PLAN_LINEAR:g}× that at {most[1]['batches']:,} (fastest runs; quadratic: "
            f"{most[0]['batches'] / most[1]['batches']:.1f}×)", f"{ratio:.2f}×",
            ratio <= PLAN_LINEAR)
    for goal, value, ok in text_packing.goals(result.meta.get("packing") or {}):
        add(goal, value, ok)
    return rows


def headline(goal_rows: list[list[str]]) -> str:
    if not goal_rows:
        return "**No goal could be measured (see the table).**"
    missed = sum(row[2] != "met" for row in goal_rows)
    parts = "; ".join(f"{goal}: {value} ({verdict})" for goal, value, verdict in goal_rows)
    summary = f"{missed} of {len(goal_rows)} goals NOT met" if missed else "all goals met"
    return f"**{summary.capitalize()}. {parts}.**"


def table_rows(result: GroupResult) -> list[list[str]]:
    base, rows = best_datasets(result), []
    for p in result.peers:
        outcome, rate = result.outcomes[p.name], real_rate(result, p.name)
        if rate is None:
            rows.append([p.label, outcome.status, *[""] * 8])
            continue
        cold, warm = (result.median(p.name, key) for key in ("startup_cold_s", "startup_s"))
        rows.append([p.label, f"{rate / 1e6:.2f}", f"{rate / base[1]:.1f}×" if base else "–",
                     f"{efficiency(result, p.name):.3f}", f"{cold or warm:.3f}",
                     f"{warm:.3f}" if cold else "–", f"{result.median(p.name, 'epoch_s'):.2f}",
                     " / ".join(f"{r['epoch_s']:.2f}" for r in outcome.runs),
                     f"{outcome.runs[0]['batches']:,}",
                     f"{max(r['others_cores'] for r in outcome.runs):.2f}"])
    return rows
