"""Aspect-ratio buckets (SDXL fine-tuning): the suite's photos at their own aspect, batched by
kohya's buckets of about 1024² pixels, read by a torch DataLoader with a bucketed batch sampler
(PIL decode + cover resize + random crop + flip in its workers) and by datapipe's Loader with
`buckets=` over the same photos converted with `--short-side 0`; beside them datapipe's
fixed-size job at the same output area (1024 x 1024). Runs as the images group's do: warm-up
epochs, then measured ones, clocked by isolated/clock.py. Output pixels per second is the
figure (buckets differ in area); the goals are datapipe at 3x the torch pipeline, and its
bucketed batches at 0.9 of its fixed-size ones."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from datapipe.suite.fixtures import ensure_forms, ensure_photos, photo_stats, warm_page_cache
from datapipe.suite.groups.buckets_peers import (
    AREA,
    BATCH,
    FIXED,
    MAX_SIDE,
    MIN_SIDE,
    STEP,
    datapipe_bucket_batches,
    datapipe_fixed_batches,
    make_aspect_datapipe,
    make_aspect_jpegs,
    torch_bucket_batches,
)
from datapipe.suite.groups.image_peers import Job
from datapipe.suite.isolated.clock import measure
from datapipe.suite.options import Options
from datapipe.suite.report import Entry, Panel, goal_verdict, markdown_table, ratio
from datapipe.suite.runner import (
    Group,
    GroupResult,
    Outcome,
    Peer,
    Record,
    paired_ratio,
    timed,
)

PEER_GOAL, FIXED_GOAL = 3.0, 0.9
JPEGS, SHARDS = "aspect-jpegs", "aspect-datapipe"
OURS, PEER, BASE = "datapipe-buckets", "torch-buckets", "datapipe-fixed"
MEGA = 1e6


def loader_run(batches: Any, modules: tuple[str, ...]) -> Any:
    def run(job: Job) -> Record:
        _, import_s = timed(lambda: [importlib.import_module(m) for m in modules])
        # crop None: a bucketed batch's size is its bucket's (the peers check their fields).
        return {**measure(batches(job), job, None), "import_s": import_s}
    return run


def _peer(name: str, label: str, form: str, batches: Any, module: str,
          ours: bool = False) -> Peer:
    return Peer(name, label, loader_run(batches, ("torch", module)), ("torch", module),
                ours=ours, tag=form)


class BucketsGroup(Group):
    name, title, report = "buckets", "Aspect-ratio buckets (SDXL training)", "buckets"
    job_type = Job
    peers = (
        _peer(PEER, "torch DataLoader + bucket sampler + PIL", JPEGS,
              torch_bucket_batches, "PIL"),
        _peer(OURS, "datapipe Loader, buckets=Buckets.kohya()", SHARDS,
              datapipe_bucket_batches, "datapipe.loader", ours=True),
        _peer(BASE, f"datapipe Loader, fixed {FIXED}² crop", SHARDS, datapipe_fixed_batches,
              "datapipe.loader", ours=True),
    )
    forms = {JPEGS: make_aspect_jpegs, SHARDS: make_aspect_datapipe}  # noqa: RUF012

    def prepare(self, opts: Options, outcomes: dict[str, Outcome]) -> dict[str, Any]:
        """The photos, their JPEGs at their own size and datapipe's conversion of them, each
        made once and read into the page cache."""
        src = ensure_photos(opts.data, opts.photos)
        peers = self.all_peers(opts)  # a --before twin reads its peer's form
        live = {p.tag for p in peers if outcomes[p.name].status == "ok"}
        forms = ensure_forms(self.name, live, peers, outcomes, src, opts.data, opts.workers)
        for record in forms.values():
            warm_page_cache(sorted(Path(record["path"]).rglob("*")))
        smoke = {"warmup": 0, "epochs": 1} if opts.smoke else {}
        return {"photos": photo_stats(src), "forms": forms, "workers": opts.workers,
                "batch": BATCH, "warmup": 1, "epochs": 1, **smoke}

    def job(self, peer: Peer, meta: dict[str, Any], opts: Options, run_dir: Path) -> Job:
        return Job(meta["forms"][peer.tag]["path"], meta["workers"], meta["epochs"],
                   meta["warmup"], batch=meta["batch"])

    def progress(self, peer: Peer, run: Record) -> str:
        return (f"{run['pixel_rate'] / MEGA:,.1f} Mpx/s, {run['rate']:,.1f} images/s (other "
                f"work: {run['others_cores']:.2f} cores)")

    def panels(self, result: GroupResult) -> list[Panel]:
        meta = result.meta
        entries = [Entry(p.name, p.label, result.outcomes[p.name].status,
                         [r["pixel_rate"] / MEGA for r in result.outcomes[p.name].runs], p.ours)
                   for p in result.peers
                   if not result.outcomes[p.name].status.startswith("not run")]
        job = (f"{meta['photos']['count']} JPEG photos at their own size and aspect → "
               f"kohya buckets (area {AREA}, step {STEP}, sides {MIN_SIDE}-{MAX_SIDE}): cover "
               f"resize + random crop + flip → uint8 batches of {meta['batch']} of one bucket "
               f"with original_size, crop_top_left, target_size, {meta['workers']} workers; "
               f"the fixed-size job: CenterCrop({FIXED}, fraction=1.0) + flip, the same shards.")
        return [Panel("buckets", self.title, "Mpx/s", entries, OURS, PEER, job=job)]

    def details(self, result: GroupResult) -> list[str]:
        return ["## Goals", "", *[f"- {line}" for line in goal_lines(result)], "",
                "## Every run", "", markdown_table(
                    ["pipeline", "Mpx/s", "images/s", f"÷ {PEER}", "Mpx/CPU-s",
                     "start-up s", "runs Mpx/s", "other work, cores"], rows(result))]


def goal_lines(result: GroupResult) -> list[str]:
    """Each goal by output pixels/s and by pixels per CPU-second (steadier when other work
    shares the cores)."""
    lines = []
    for key, unit in (("pixel_rate", "pixels/s"), ("cpu_pixel_rate", "pixels per CPU-second")):
        ours, peer = result.median(OURS, key), result.median(PEER, key)
        lines.append(f"By {unit}: {OURS} {ours / peer:.2f}× the torch DataLoader "
                     f"({goal_verdict(PEER_GOAL, ours >= PEER_GOAL * peer)})"
                     if ours and peer else f"By {unit}: {OURS} ≥ {PEER_GOAL:g}× {PEER}: not "
                     f"measured ({result.outcomes[PEER if ours else OURS].status})")
        share = paired_ratio(result.outcomes[OURS], result.outcomes[BASE],
                             lambda run, k=key: run[k])
        met = share is not None and share >= FIXED_GOAL
        lines.append(f"By {unit}: {OURS} {share:.3f} of the fixed-size job's rate on the same "
                     "shards, the median of the rounds' ratios (each round runs the two back "
                     f"to back) ({goal_verdict(FIXED_GOAL, met, '')})"
                     if share is not None else f"By {unit}: fixed-size ratio: not measured "
                     f"({result.outcomes[BASE].status})")
    return lines


def rows(result: GroupResult) -> list[list[str]]:
    peer, table = result.median(PEER, "pixel_rate"), []
    for p in result.peers:
        rate, outcome = result.median(p.name, "pixel_rate"), result.outcomes[p.name]
        if rate is None:
            table.append([p.label, outcome.status, "", "", "", "", "", ""])
            continue
        table.append([p.label, f"{rate / MEGA:,.1f}", f"{result.median(p.name, 'rate'):,.1f}",
                      ratio(rate, peer), f"{result.median(p.name, 'cpu_pixel_rate') / MEGA:,.1f}",
                      f"{result.median(p.name, 'start_s'):.1f}",
                      " / ".join(f"{r['pixel_rate'] / MEGA:,.1f}" for r in outcome.runs),
                      " / ".join(f"{r['others_cores']:.2f}" for r in outcome.runs)])
    return table


GROUP = BucketsGroup()
