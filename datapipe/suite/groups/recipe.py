"""The training recipe people use (timm's and torchvision's references): RandomResizedCrop 224,
flip, RandAugment(2, 9), ImageNet's Normalize, RandomErasing 0.25, Mixup 0.8 / CutMix 1.0, in
batches of 128 on `workers` processes. torch's DataLoader with torchvision v2 in its workers and
timm's Mixup on the batch reads the photo folder, in .venv-vision (vision.py); datapipe reads
its shards of the same photos, with its built-in steps (the main venv) and with the script's
own torchvision transforms and Mixup as its per-sample and per-batch steps (.venv-vision, the
checkout's datapipe); and the plain pipeline with and without a per-sample function that does
nothing, for what the escape hatch costs by itself. Runs as the images group's do: warm-up
epochs, then measured ones, clocked by isolated/clock.py.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict
from pathlib import Path
from typing import Any

from datapipe.suite.fixtures import CROP, datapipe_shards, list_photos
from datapipe.suite.groups import vision
from datapipe.suite.groups.recipe_peers import (
    BATCH,
    BUILT_IN,
    NOOP,
    RECIPE,
    USER,
    Job,
    built_in,
    missing,
    plain,
    recipe_batches,
    user_callables,
)
from datapipe.suite.isolated import clock, vision_run
from datapipe.suite.options import Options
from datapipe.suite.report import Entry, Panel, goal_verdict, markdown_table, ratio
from datapipe.suite.runner import (
    BEFORE,
    Group,
    GroupResult,
    Outcome,
    Peer,
    Record,
    paired_ratio,
    timed,
)

# (ours, theirs, least ratio of their images/s); and the most a do-nothing function may cost.
GOALS = (("datapipe", "torch", 2.5), ("datapipe-user", "torch", 1.3))
NOOP_COST = 0.05
# The plain and do-nothing rows run 4x the epochs: at 4,000-5,000 images/s two epochs of the
# suite's photos last about a second, too short for a 5 % difference to stand out of the spread.
LONG_ROWS, LONG_EPOCHS = ("datapipe-plain", "datapipe-noop"), 4
NEEDS = {"datapipe": BUILT_IN, "datapipe-user": USER, "datapipe-noop": NOOP}
IN_VISION_VENV = ("torch", "datapipe-user")


def loader_run(transform: Any, *modules: str) -> Any:
    """A datapipe peer's measure: its modules imported (not clocked), then its batches with
    transform(number of classes)."""
    def run(job: Job) -> Record:
        _, import_s = timed(lambda: [importlib.import_module(m) for m in modules])
        batches = recipe_batches(job, transform(job.classes))
        return {**clock.measure(batches, job, CROP, "float32"), "import_s": import_s}
    return run


class RecipeGroup(Group):
    name, title, report = "recipe", "Training recipe (timm-style augmentation)", "recipe"
    job_type = Job
    # All tagged "recipe": `--skip recipe` leaves the whole group out.
    peers = (
        Peer("torch", "torch DataLoader + torchvision v2 + timm Mixup (.venv-vision)", None,
             tag="recipe"),
        Peer("datapipe", "datapipe Loader, built-in steps",
             loader_run(built_in, "datapipe.loader"), ours=True, tag="recipe"),
        Peer("datapipe-user", "datapipe Loader, torchvision v2 PerSample + timm Mixup PerBatch "
             "(.venv-vision)", loader_run(user_callables, "datapipe.loader",
                                          "torchvision.transforms.v2", "timm.data"),
             ours=True, tag="recipe"),
        Peer("datapipe-plain", "datapipe Loader, plain: crop, flip, Normalize",
             loader_run(lambda _: plain(noop=False), "datapipe.loader"), ours=True,
             tag="recipe"),
        Peer("datapipe-noop", "datapipe Loader, plain + PerSample(a function doing nothing)",
             loader_run(lambda _: plain(noop=True), "datapipe.loader"), ours=True,
             tag="recipe"),
    )

    def prepare(self, opts: Options, outcomes: dict[str, Outcome]) -> dict[str, Any]:
        """Which runs can be made here, then the photos and, for datapipe's runs, its shards
        (the images group's, shared)."""
        for name, outcome in outcomes.items():
            if outcome.status != "ok":
                continue
            if name.removesuffix(BEFORE) in IN_VISION_VENV and not vision.VENV.ready():
                outcome.status = vision.NOT_INSTALLED
            else:
                outcome.status = missing(NEEDS.get(name.removesuffix(BEFORE), ())) \
                    or "ok"
        meta: dict[str, Any] = {"workers": opts.workers, "repeats": opts.repeats,
                                "batch": 16 if opts.smoke else BATCH,
                                "warmup": 0 if opts.smoke else 1,
                                "epochs": 1 if opts.smoke else 2,
                                "long_epochs": 1 if opts.smoke else LONG_EPOCHS,
                                "recipe": RECIPE}
        if not any(o.status == "ok" for o in outcomes.values()):
            return meta
        shards, meta["photos"] = datapipe_shards(opts.data, opts.photos, opts.workers)
        meta["shards"] = str(shards)
        meta["classes"] = 1 + max(label for _, label in list_photos(Path(meta["photos"]["path"])))
        return meta

    def job(self, peer: Peer, meta: dict[str, Any], opts: Options, run_dir: Path) -> Job:
        data = meta["photos"]["path"] if peer.name == "torch" else meta["shards"]
        times = meta.get("long_epochs", 1) if peer.name.removesuffix(BEFORE) in LONG_ROWS \
            else 1
        return Job(data, meta["workers"], meta["epochs"] * times, meta["classes"],
                   meta["warmup"], batch=meta["batch"])

    def attempt(self, peer: Peer, job: Any, run_dir: Path, opts: Options) -> Record:
        if peer.name == "torch":  # torchvision and timm: the vision venv, by path
            return vision.run_isolated(Path(vision_run.__file__),
                                       {**asdict(job), "recipe": RECIPE}, run_dir)
        if peer.name.removesuffix(BEFORE) == "datapipe-user":  # torchvision in the workers
            return vision.run_datapipe(self.name, peer, asdict(job), run_dir)
        return super().attempt(peer, job, run_dir, opts)

    def progress(self, peer: Peer, run: Record) -> str:
        return f"{run['rate']:,.0f} images/s (other work: {run['others_cores']:.2f} cores)"

    def panels(self, result: GroupResult) -> list[Panel]:
        meta = result.meta
        entries = [Entry(p.name, p.label, result.outcomes[p.name].status,
                         [r["rate"] for r in result.outcomes[p.name].runs], p.ours)
                   for p in result.peers]
        count = meta["photos"]["count"] if "photos" in meta else "the"
        job = (f"{count} JPEG photos → RandomResizedCrop {CROP}, flip, RandAugment(2, 9), "
               "Normalize, RandomErasing 0.25, Mixup 0.8 / CutMix 1.0 → float32 batches of "
               f"{meta['batch']} with soft targets, {meta['workers']} workers.")
        return [Panel("recipe", self.title, "images/s", entries, "datapipe", "torch", job=job)]

    def details(self, result: GroupResult) -> list[str]:
        return ["## Goals", "", *[f"- {line}" for line in goal_lines(result)], "",
                "## Every run", "", markdown_table(
                    ["pipeline", "images/s", "÷ torch", "images/CPU-s", "start-up s",
                     "runs images/s"], rows(result)), "", f"- {NOTE}"]


NOTE = ("Each run: a fresh process; torch reads the photo folder, datapipe its shards of the "
        "same photos (shorter side 256, JPEG q90). Full batches only, as timm trains (its "
        "Mixup pairs the images of a batch). images/CPU-s: per CPU-second of the run's whole "
        "process tree. datapipe's steps run in its workers or on the batch by datapipe's rule; "
        "torch's Mixup runs on each batch in the training process, as timm's train script has it. "
        f"The plain and do-nothing rows run {LONG_EPOCHS}x the measured epochs of the others, so "
        "that the do-nothing function's few percent stand out of the spread.")


def goal_lines(result: GroupResult) -> list[str]:
    lines = []
    for ours, theirs, goal in GOALS:
        mine, base = result.median(ours, "rate"), result.median(theirs, "rate")
        if mine and base:
            lines.append(f"{ours}: {mine / base:.2f}× {theirs} "
                         f"({goal_verdict(goal, mine >= goal * base)})")
        else:
            why = result.outcomes[theirs if mine else ours].status
            lines.append(f"{ours} ≥ {goal:g}× {theirs}: not measured ({why})")
    noop, plain = result.median("datapipe-noop", "rate"), result.median("datapipe-plain", "rate")
    cost = paired_cost(result.outcomes["datapipe-noop"], result.outcomes["datapipe-plain"])
    if noop and plain and cost is not None:
        lines.append(f"A per-sample function doing nothing costs {cost:.1%} of the plain "
                     f"pipeline's images/s, the median of the rounds' costs (each round runs "
                     f"the two back to back; the medians' ratio: {1 - noop / plain:.1%}) "
                     f"(goal ≤ {NOOP_COST:.0%}: {'met' if cost <= NOOP_COST else 'NOT met'})")
    else:
        lines.append(f"The do-nothing function's cost: not measured "
                     f"({result.outcomes['datapipe-noop'].status})")
    return lines


def paired_cost(noop: Outcome, plain: Outcome) -> float | None:
    """The do-nothing function's cost: 1 - the median over rounds of noop / plain."""
    ratio = paired_ratio(noop, plain, lambda run: run["rate"])
    return None if ratio is None else 1 - ratio


def rows(result: GroupResult) -> list[list[str]]:
    torch_rate, table = result.median("torch", "rate"), []
    for p in result.peers:
        rate, outcome = result.median(p.name, "rate"), result.outcomes[p.name]
        if rate is None:
            table.append([p.label, outcome.status, "", "", "", ""])
            continue
        table.append([p.label, f"{rate:,.0f}", ratio(rate, torch_rate),
                      f"{result.median(p.name, 'cpu_rate'):,.0f}",
                      f"{result.median(p.name, 'start_s'):.1f}",
                      " / ".join(f"{r['rate']:,.0f}" for r in outcome.runs)])
    return table


GROUP = RecipeGroup()
