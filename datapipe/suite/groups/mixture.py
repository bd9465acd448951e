"""Mixtures: what reading three datasets by weight (0.6 / 0.3 / 0.1) costs against reading the
same samples as one dataset, for images (Loader, RandomResizedCrop 224 + flip, as the images
group's datapipe row) and tokens (TokenLoader, packed); and the token mixture against HF's
`interleave_datasets(probabilities=...)` + DataLoader over the same documents. The sources are
the one dataset's samples split 60 / 30 / 10 % (by tokens for text: mixture_peers), so the
weights are their shares and an epoch of the mixture is an epoch of the one dataset.
"""

from __future__ import annotations

import functools
import statistics
from pathlib import Path
from typing import Any

from datapipe.suite.fixtures import CROP, datapipe_shards, warm_page_cache
from datapipe.suite.groups import mixture_peers as mp
from datapipe.suite.groups import text_peers as tp
from datapipe.suite.groups.image_peers import datapipe_batches
from datapipe.suite.groups.images import loader_run
from datapipe.suite.options import Options
from datapipe.suite.report import Entry, Panel, fmt, markdown_table
from datapipe.suite.runner import (
    CHILD_ENV,
    Group,
    GroupResult,
    Outcome,
    Peer,
    Record,
    paired_ratio,
)

GOAL_VS_ONE = 0.95  # the mixture's rate over the one dataset's, at least
GOAL_VS_INTERLEAVE = 10.0  # the token mixture's real tokens/s over interleave_datasets', at least
IMAGE_BATCH, IMAGE_WARMUP, IMAGE_EPOCHS = 64, 1, 8
TOKEN_EPOCHS = 60  # ~4 s a run: a few percent stands out of a shared machine's spread
INTERLEAVE_WORKERS = 2
PARTS = {"images": ("images-one", "images-mix"), "tokens": ("tokens-one", "tokens-mix")}
WEIGHTS = " / ".join(f"{w:g}" for w in mp.SPLITS.values())


def image_row(name: str, label: str, **mixing: Any) -> Peer:
    batches = functools.partial(datapipe_batches, decode="cpu", **mixing)
    return Peer(name, label, loader_run(batches, ("torch", "datapipe.loader")), ("torch",),
                ours=True, tag="images")


def token_row(name: str, label: str, **mixing: Any) -> Peer:
    return Peer(name, label, tp.one_thread(mp.run_tokens, **mixing), ("torch",), ours=True,
                tag="tokens")


class MixtureGroup(Group):
    name, title, report = "mixture", "Mixtures of three datasets", "mixture"
    job_type = mp.Job
    peers = (
        image_row("images-one", "datapipe Loader, one dataset"),
        image_row("images-mix", f"datapipe Loader, 3 sources at {WEIGHTS}", weights=mp.SPLITS),
        token_row("tokens-one", "datapipe TokenLoader (packed), one dataset"),
        token_row("tokens-mix", f"datapipe TokenLoader (packed), 3 sources at {WEIGHTS}",
                  weights=mp.SPLITS),
        Peer("interleave", f"HF interleave_datasets + DataLoader (pad to longest, workers "
             f"{INTERLEAVE_WORKERS})", tp.one_thread(mp.run_interleave), ("torch", "datasets"),
             tag="datasets"),
    )

    def prepare(self, opts: Options, outcomes: dict[str, Outcome]) -> dict[str, Any]:
        """The one dataset and its three splits of each part still in the running, made once
        under DATA (the images and text groups' datasets, shared), and page-cached."""
        meta: dict[str, Any] = {"workers": opts.workers, "repeats": opts.repeats,
                                "sources": mp.SPLITS}
        if any(outcomes[name].status == "ok" for name in PARTS["images"]):
            meta["images"] = prepare_images(opts)
        if any(outcomes[name].status == "ok" for name in (*PARTS["tokens"], "interleave")):
            meta["tokens"] = prepare_tokens(opts, outcomes["interleave"])
        return meta

    def job(self, peer: Peer, meta: dict[str, Any], opts: Options, run_dir: Path) -> mp.Job:
        mixture = peer.name.removesuffix("-before").endswith("-mix")
        if peer.tag == "images":
            part = meta["images"]
            return mp.Job(part["mix" if mixture else "one"], meta["workers"], part["epochs"],
                          part["warmup"], batch=part["batch"])
        part = meta["tokens"]
        if peer.tag == "datasets":
            return mp.Job(part["hf"], INTERLEAVE_WORKERS, 1, batch=part["datasets_batch_size"])
        return mp.Job(part["mix" if mixture else "one"], 0, part["epochs"],
                      max_tokens=part["max_tokens"])

    def progress(self, peer: Peer, run: Record) -> str:
        return f"{fmt(rate(peer.tag, run))} {unit(peer.tag)} (other work: " \
            f"{run['others_cores']:.2f} cores)"

    def panels(self, result: GroupResult) -> list[Panel]:
        meta, panels = result.meta, []
        for part, (one, mix) in PARTS.items():
            entries = [Entry(p.name, p.label, result.outcomes[p.name].status,
                             [rate(p.tag, r) for r in result.outcomes[p.name].runs], p.ours,
                             reference=p.name.removesuffix("-before") == one)
                       for p in result.peers if part_of(p) == part]
            goals = " ".join(f"{line}." for line in goal_lines(result, part))
            panels.append(Panel(f"mixture-{part}", f"Mixture of three datasets: {part}",
                                unit(part), entries, mix, one,
                                job=f"{goals} {job_line(part, meta.get(part))}"))
        return panels

    def details(self, result: GroupResult) -> list[str]:
        lines = ["## Goals", ""]
        lines += [f"- {line}" for part in PARTS for line in goal_lines(result, part)]
        per_cpu = [f"{mix} {mine / base:.2f}× {one}" for one, mix in PARTS.values()
                   for base, mine in [(result.median(one, "cpu_rate"),
                                       result.median(mix, "cpu_rate"))] if mine and base]
        if per_cpu:
            lines.append("- Per CPU-second (images: of the loader's process tree; tokens: of "
                         "the training process, where TokenLoader works), steadier than per "
                         f"second when other work shares the cores: {'; '.join(per_cpu)}")
        for part in PARTS:
            lines += ["", f"## {part.capitalize()}: every run", "", job_line(
                part, result.meta.get(part)), "", markdown_table(
                    ["row", f"{unit(part)} (median)", "min–max", "runs", "per CPU-s",
                     "start-up s", "other work (cores)"], table_rows(result, part))]
        return [*lines, "", *[f"- {note}" for note in notes(result.meta)]]


GROUP = MixtureGroup()


# ---------------------------------------------------------------- the inputs


def prepare_images(opts: Options) -> dict[str, Any]:
    shards, photos = datapipe_shards(opts.data, opts.photos, opts.workers)
    splits = mp.image_splits(shards)
    warm_page_cache(sorted(splits.rglob("*")))
    smoke = {"batch": 16, "warmup": 0, "epochs": 1} if opts.smoke else {}
    return {"one": str(shards), "mix": {name: str(splits / name) for name in mp.SPLITS},
            "photos": photos, "samples": sizes(splits, "samples"), "batch": IMAGE_BATCH,
            "workers": opts.workers, "warmup": IMAGE_WARMUP, "epochs": IMAGE_EPOCHS, **smoke}


def prepare_tokens(opts: Options, interleave: Outcome) -> dict[str, Any]:
    """The text suite's dataset and its splits by tokens; for the interleave row, the text
    group's `datasets` copy split the same way, which fails that row unless each part holds
    the documents and tokens of datapipe's."""
    import os

    corpus, spec, _, dataset = tp.suite_dataset(opts.data, opts.text_mb, opts.workers)
    splits = mp.token_splits(dataset, corpus, spec, opts.workers)
    warm_page_cache(sorted(splits.rglob("*")))
    counts = sizes(splits, "tokens")
    documents, tokens = (sum(c[key] for c in counts.values()) for key in ("documents", "tokens"))
    part = {"one": str(dataset), "mix": {name: str(splits / name) for name in mp.SPLITS},
            "tokens": tokens, "documents": documents, "sources": counts,
            "max_tokens": mp.MAX_TOKENS, "epochs": 1 if opts.smoke else TOKEN_EPOCHS,
            # `datasets` rows per batch, as the text group's: max_tokens real tokens on average
            "datasets_batch_size": max(1, round(mp.MAX_TOKENS * documents / tokens)), "hf": {}}
    if interleave.status != "ok":
        return part
    for key, value in CHILD_ENV.items():  # `datasets` must not reach the Hub here either
        os.environ.setdefault(key, value)
    hf = mp.hf_splits(tp.hf_copy(corpus, spec, dataset, opts.workers), splits)
    part["hf"] = {name: str(hf / name) for name in mp.SPLITS}
    for name, count in counts.items():
        if tp.hf_counts(hf / name) != (count["documents"], count["tokens"]):
            interleave.status = f"failed: {hf / name}: not the documents and tokens of " \
                f"{splits / name}"
    return part


def sizes(splits: Path, unit_: str) -> dict[str, dict[str, int]]:
    """Per source: its samples, or its documents and tokens."""
    from datapipe.format.dataset import Dataset

    counts = {}
    for name in mp.SPLITS:
        with Dataset(splits / name) as ds:
            counts[name] = {"samples": len(ds)} if unit_ == "samples" else \
                {"documents": len(ds), "tokens": int(ds.scalar("length").sum())}
    return counts


# ---------------------------------------------------------------- figures, goals, tables


def part_of(peer: Peer) -> str:
    return "images" if peer.tag == "images" else "tokens"


def unit(tag: str) -> str:
    return "images/s" if tag == "images" else "real tokens/s"


def rate(tag: str, run: Record) -> float:
    return run["rate"] if tag == "images" else run["real_tokens"] / run["epoch_s"]


def steady_rate(tag: str, run: Record) -> float:
    """A run's rate with bursts of other work on the machine left out: for tokens, the median
    of its epochs' real tokens/s (each epoch's planning in it); for images, its rate."""
    rates = run.get("epoch_rates") if tag == "tokens" else None
    return statistics.median(rates) if rates else rate(tag, run)


def median_rate(result: GroupResult, name: str) -> float | None:
    """The median of a row's rates, or None where it did not run."""
    outcome = result.outcomes[name]
    tag = "images" if name.startswith("images") else "tokens"
    rates = [rate(tag, r) for r in outcome.runs]
    return statistics.median(rates) if outcome.status == "ok" and rates else None


def goal_line(result: GroupResult, ours: str, theirs: str, goal: float,
              paired: bool = False) -> str:
    """"tokens-mix ≥ 10× interleave: 31.2× (met)", or why it was not measured. `paired`: a
    bar a few percent below 1, which the spread of one row's runs on a shared machine
    exceeds: the median of the rounds' ratios of the runs' steady rates decides (each round
    runs the two back to back), the medians' ratio beside it."""
    mine, base = median_rate(result, ours), median_rate(result, theirs)
    what = f"{ours} ≥ {goal:g}× {theirs}"
    if not (mine and base):
        return f"{what}: not measured ({result.outcomes[theirs if mine else ours].status})"
    ratio, how = mine / base, ""
    if paired:
        tag = "images" if ours.startswith("images") else "tokens"
        by_round = paired_ratio(result.outcomes[ours], result.outcomes[theirs],
                                functools.partial(steady_rate, tag))
        if by_round is not None:
            steady = " of each run's median epoch" if tag == "tokens" else ""
            how = (f" (the median of the rounds' ratios{steady}, each round's two runs back "
                   f"to back; the medians' ratio: {ratio:.2f}×)")
            ratio = by_round
    return f"{what}: {ratio:.2f}×{how} ({'met' if ratio >= goal else 'NOT met'})"


def goal_lines(result: GroupResult, part: str) -> list[str]:
    one, mix = PARTS[part]
    lines = [goal_line(result, mix, one, GOAL_VS_ONE, paired=True)]
    if part == "tokens":
        lines.append(goal_line(result, mix, "interleave", GOAL_VS_INTERLEAVE))
    return lines


def job_line(part: str, meta: dict[str, Any] | None) -> str:
    if meta is None:
        return "Not run."
    if part == "images":
        shares = ", ".join(f"{name} {c['samples']:,}" for name, c in meta["samples"].items())
        return (f"{meta['photos']['count']:,} photos, as one dataset and as 3 sources of "
                f"{shares} samples (weights {WEIGHTS}) → RandomResizedCrop {CROP} + flip, "
                f"batches of {meta['batch']}, {meta['workers']} workers, {meta['warmup']} warm-up "
                f"and {meta['epochs']} measured epochs per run.")
    shares = ", ".join(f"{name} {c['tokens']:,}" for name, c in meta["sources"].items())
    return (f"{meta['tokens']:,} tokens in {meta['documents']:,} documents, as one dataset and "
            f"as 3 sources of {shares} tokens (weights {WEIGHTS} by tokens) → packed batches "
            f"of {meta['max_tokens']:,} tokens, {meta['epochs']} epoch(s) per run; "
            f"interleave_datasets(probabilities, stopping_strategy=\"{mp.STOPPING}\"): "
            f"one epoch of batches of {meta['datasets_batch_size']} documents.")


def table_rows(result: GroupResult, part: str) -> list[list[str]]:
    rows = []
    for peer in (p for p in result.peers if part_of(p) == part):
        outcome, median = result.outcomes[peer.name], median_rate(result, peer.name)
        if median is None:
            rows.append([peer.label, outcome.status, "", "", "", "", ""])
            continue
        rates = [rate(peer.tag, r) for r in outcome.runs]
        startup = result.median(peer.name, "start_s" if part == "images" else "startup_s")
        per_cpu = result.median(peer.name, "cpu_rate")
        rows.append([peer.label, fmt(median), f"{fmt(min(rates))}–{fmt(max(rates))}",
                     " / ".join(fmt(r) for r in rates), fmt(per_cpu) if per_cpu else "–",
                     f"{startup:.2f}",
                     f"{max(r['others_cores'] for r in outcome.runs):.2f}"])
    return rows


def notes(meta: dict[str, Any]) -> list[str]:
    return [
        "Each figure: the median of the runs, each in a fresh process, the rows interleaved "
        "round by round. The sources are the one dataset's samples split at random into 60, 30 "
        "and 10 % (images by samples, text by tokens): the images written with dp.DatasetWriter "
        "(the same JPEG bytes), the documents' lines of the corpus converted as the one dataset "
        "was (the same token ids and tokenizer), so that the weights are their shares and an "
        "epoch of the mixture is the one dataset's epoch.",
        "images/s: counted from the warm-up's last batch to the last batch (images group's "
        "clock). Real tokens/s: tokens of documents over the seconds from the loader made to "
        "its last batch, every epoch's planning included; TokenLoader runs in the training "
        "process (num_workers=0) with one torch thread, as in the text group. The goals "
        "against one dataset pair each round's two runs and compare their steady rates: for "
        "tokens the median of a run's epochs (after the first), each epoch's real tokens over "
        "its seconds, its planning included. Other work on a shared machine comes in bursts of a "
        "second or two that slow one run by a third; the median epoch leaves them out.",
        f"interleave: HF datasets' interleave_datasets over the text group's `datasets` copy "
        f"of the corpus, split into the same documents as the sources; a DataLoader with "
        f"{INTERLEAVE_WORKERS} workers, shuffle=True and the text group's pad-to-longest "
        "collate. It samples documents, not tokens, at the weights: its epoch holds every "
        f"document at least once (\"{mp.STOPPING}\"), some twice.",
        f"Workers: {meta['workers']}; other work: the most cores other processes used during "
        "any run of that row.",
    ]

