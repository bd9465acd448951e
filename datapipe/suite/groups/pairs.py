"""Image-caption pairs (CLIP / SigLIP training): the suite's photos with a caption each, read
from the same WebDataset tars by an OpenCLIP-style torch DataLoader (webdataset + PIL +
tokenizer in its workers) and by datapipe's Loader over the tars converted with their captions
(`convert images --tokenizer`), with and without the captions. Runs as the images group's do:
warm-up epochs, then measured ones, clocked by isolated/clock.py; the goals are datapipe at
3x the OpenCLIP-style pipeline, and its captioned batches at 0.95 of its images-only ones."""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import Any

from datapipe.suite.fixtures import CROP, ensure_forms, ensure_photos, photo_stats, warm_page_cache
from datapipe.suite.groups.image_peers import Job
from datapipe.suite.groups.pairs_peers import (
    CONTEXT,
    TOKENIZER_MISSING,
    datapipe_pairs_batches,
    make_captioned_datapipe,
    make_captioned_tars,
    openclip_batches,
)
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

PEER_GOAL, IMAGES_ONLY_GOAL = 3.0, 0.95
TARS, SHARDS = "captioned-tars", "captions-datapipe"


def loader_run(batches: Any, modules: tuple[str, ...]) -> Any:
    def run(job: Job) -> Record:
        _, import_s = timed(lambda: [importlib.import_module(m) for m in modules])
        return {**measure(batches(job), job, CROP), "import_s": import_s}
    return run


def _peer(name: str, label: str, form: str, batches: Any, *modules: str,
          ours: bool = False) -> Peer:
    return Peer(name, label, loader_run(batches, ("torch", *modules)), ("torch", *modules),
                ours=ours, tag=form)


class PairsGroup(Group):
    name, title, report = "pairs", "Image-caption pairs (CLIP training)", "pairs"
    job_type = Job
    peers = (
        _peer("openclip", "OpenCLIP-style: webdataset + PIL + tokenizer, DataLoader", TARS,
              openclip_batches, "webdataset", "tokenizers"),
        _peer("datapipe-pairs", 'datapipe Loader, images + captions (captions="openclip")',
              SHARDS, functools.partial(datapipe_pairs_batches, captions="openclip"),
              "datapipe.loader", ours=True),
        _peer("datapipe-images", "datapipe Loader, the same shards' images alone", SHARDS,
              functools.partial(datapipe_pairs_batches, captions=False), "datapipe.loader",
              ours=True),
    )
    forms = {TARS: make_captioned_tars, SHARDS: make_captioned_datapipe}  # noqa: RUF012

    def prepare(self, opts: Options, outcomes: dict[str, Outcome]) -> dict[str, Any]:
        """The photos, their captioned tars and datapipe's conversion of them, each made once
        and read into the page cache."""
        from datapipe.suite.fixtures import wordpiece_tokenizer

        if wordpiece_tokenizer() is None:
            for outcome in outcomes.values():
                if outcome.status == "ok":
                    outcome.status = TOKENIZER_MISSING
        src = ensure_photos(opts.data, opts.photos)
        peers = self.all_peers(opts)  # a --before twin reads its peer's form
        live = {p.tag for p in peers if outcomes[p.name].status == "ok"}
        forms = ensure_forms(self.name, live, peers, outcomes, src, opts.data, opts.workers)
        for record in forms.values():
            warm_page_cache(sorted(Path(record["path"]).rglob("*")))
        smoke = {"batch": 16, "warmup": 0, "epochs": 1} if opts.smoke else {}
        return {"photos": photo_stats(src), "forms": forms, "workers": opts.workers,
                "batch": 256, "warmup": 1, "epochs": 2, **smoke}

    def job(self, peer: Peer, meta: dict[str, Any], opts: Options, run_dir: Path) -> Job:
        return Job(meta["forms"][peer.tag]["path"], meta["workers"], meta["epochs"],
                   meta["warmup"], batch=meta["batch"])

    def progress(self, peer: Peer, run: Record) -> str:
        return f"{run['rate']:,.0f} pairs/s (other work: {run['others_cores']:.2f} cores)"

    def panels(self, result: GroupResult) -> list[Panel]:
        meta = result.meta
        entries = [Entry(p.name, p.label, result.outcomes[p.name].status,
                         [r["rate"] for r in result.outcomes[p.name].runs], p.ours)
                   for p in result.peers
                   if not result.outcomes[p.name].status.startswith("not run")]
        job = (f"{meta['photos']['count']} JPEG photos with a caption each, from WebDataset "
               f"tars → random-resized crop {CROP} + flip → uint8 batches of {meta['batch']} "
               f"with (B, {CONTEXT}) token ids, {meta['workers']} workers.")
        return [Panel("pairs", self.title, "pairs/s", entries, "datapipe-pairs", "openclip",
                      job=job)]

    def details(self, result: GroupResult) -> list[str]:
        return ["## Goals", "", *[f"- {line}" for line in goal_lines(result)], "",
                "## Every run", "", markdown_table(
                    ["pipeline", "pairs/s", "÷ OpenCLIP-style", "pairs/CPU-s", "start-up s",
                     "runs pairs/s"], rows(result))]


def goal_lines(result: GroupResult) -> list[str]:
    """Each goal by pairs/s and by pairs per CPU-second (steadier when other work shares the
    cores)."""
    lines = []
    for key, unit in (("rate", "pairs/s"), ("cpu_rate", "pairs per CPU-second")):
        ours, peer = result.median("datapipe-pairs", key), result.median("openclip", key)
        lines.append(f"By {unit}: datapipe-pairs {ours / peer:.2f}× the OpenCLIP-style "
                     f"pipeline ({goal_verdict(PEER_GOAL, ours >= PEER_GOAL * peer)})"
                     if ours and peer else f"By {unit}: datapipe-pairs ≥ {PEER_GOAL:g}× "
                     f"openclip: not measured "
                     f"({result.outcomes['openclip' if ours else 'datapipe-pairs'].status})")
        share = paired_ratio(result.outcomes["datapipe-pairs"],
                             result.outcomes["datapipe-images"], lambda run, k=key: run[k])
        met = share is not None and share >= IMAGES_ONLY_GOAL
        lines.append(f"By {unit}: datapipe-pairs {share:.3f} of its images-only rate on the "
                     "same shards, the median of the rounds' ratios (each round runs the two "
                     f"back to back) ({goal_verdict(IMAGES_ONLY_GOAL, met, '')})"
                     if share is not None else f"By {unit}: images-only ratio: not measured "
                     f"({result.outcomes['datapipe-images'].status})")
    return lines


def rows(result: GroupResult) -> list[list[str]]:
    peer, table = result.median("openclip", "rate"), []
    for p in result.peers:
        rate, outcome = result.median(p.name, "rate"), result.outcomes[p.name]
        if rate is None:
            table.append([p.label, outcome.status, "", "", "", ""])
            continue
        table.append([p.label, f"{rate:,.0f}", ratio(rate, peer),
                      f"{result.median(p.name, 'cpu_rate'):,.0f}",
                      f"{result.median(p.name, 'start_s'):.1f}",
                      " / ".join(f"{r['rate']:,.0f}" for r in outcome.runs)])
    return table


GROUP = PairsGroup()
