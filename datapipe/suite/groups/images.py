"""Image loading: every loader on one set of photos and one job (image_peers says which).

torch and DALI read the photo folder; WebDataset, LitData and datapipe read the same photos
re-encoded at shorter side 256, JPEG q90 (datapipe's own resize + re-encode, identical bytes),
FFCV its own .beton; the converted forms are made once, outside any timing, and reused. Every
run iterates `warmup` epochs, then `epochs` measured ones: the clock runs from the warm-up's
last batch to the last batch, as the decode-only ceiling is measured with its pool warm.
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import Any

from datapipe.suite.fixtures import (
    CROP,
    PIECES,
    ensure_forms,
    ensure_photos,
    make_datapipe,
    photo_stats,
    warm_page_cache,
)
from datapipe.suite.groups import ffcv
from datapipe.suite.groups.image_peers import (
    Job,
    dali_batches,
    datapipe_batches,
    litdata_batches,
    make_litdata,
    make_webdataset,
    torch_batches,
    webdataset_batches,
)
from datapipe.suite.isolated.clock import measure, tree_cpu_seconds
from datapipe.suite.options import Options
from datapipe.suite.report import Entry, Panel, goal_verdict, markdown_table, ratio
from datapipe.suite.runner import (
    Group,
    GroupResult,
    Outcome,
    Peer,
    Record,
    timed,
)

GOALS = {"torch": 3.0, "dali": 2.0}  # datapipe (decode="cpu") >= this many times the tool
CEILING_GOAL = 0.85  # datapipe >= this fraction of the decode-only ceiling
FORM_LABELS = {"photos": "JPEG folder", "webdataset": f"{PIECES} tar shards",
               "litdata": f"{PIECES} LitData chunks", "datapipe": "datapipe shards",
               "ffcv": ffcv.FORM_LABEL}


def loader_run(batches: Any, modules: tuple[str, ...]) -> Any:
    """A peer's measure: its modules imported (not clocked), then its batches clocked."""
    def run(job: Job) -> Record:
        _, import_s = timed(lambda: [importlib.import_module(m) for m in modules])
        return {**measure(batches(job), job, CROP), "import_s": import_s}
    return run


def measure_ceiling(job: Job) -> Record:
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


def peer(name: str, label: str, form: str, batches: Any, *modules: str,
         ours: bool = False) -> Peer:
    return Peer(name, label, loader_run(batches, ("torch", *modules)), ("torch", *modules),
                ours=ours, tag=form)


class ImagesGroup(Group):
    name, title, report = "images", "Image loading", "loader"
    job_type = Job
    peers = (
        peer("torch", "torch DataLoader + PIL", "photos", torch_batches),
        peer("dali", "DALI CPU pipeline", "photos", dali_batches, "nvidia.dali"),
        peer("webdataset", "WebDataset + WebLoader", "webdataset", webdataset_batches,
             "webdataset"),
        peer("litdata", "LitData StreamingDataLoader", "litdata", litdata_batches, "litdata"),
        peer("datapipe", 'datapipe Loader, decode="cpu"', "datapipe",
             functools.partial(datapipe_batches, decode="cpu"), "datapipe.loader", ours=True),
        peer("datapipe-dali", 'datapipe Loader, decode="dali"', "datapipe",
             functools.partial(datapipe_batches, decode="dali"), "datapipe.loader",
             "nvidia.dali", ours=True),
        Peer("ceiling", "decode-only ceiling (full decode)", measure_ceiling, reference=True,
             tag="datapipe"),
        Peer("ffcv", "FFCV Loader (.venv-ffcv)", None, tag="ffcv"),
    )
    forms = {"webdataset": make_webdataset, "litdata": make_litdata,  # noqa: RUF012
             "datapipe": make_datapipe, "ffcv": ffcv.make_beton}

    def prepare(self, opts: Options, outcomes: dict[str, Outcome]) -> dict[str, Any]:
        """The photos and every converted form a peer still in the running reads; a form that
        fails to convert fails its readers. Every file is read once so that no peer pays, or
        is spared, the cold-disk reads."""
        if outcomes["ffcv"].status == "ok" and not ffcv.ready():
            outcomes["ffcv"].status = f"not installed ({ffcv.SETUP_HINT})"
        src = ensure_photos(opts.data, opts.photos)
        forms: dict[str, dict[str, Any]] = {"photos": {"path": str(src)}}
        wanted = {p.tag for p in self.peers if outcomes[p.name].status == "ok"} - {"photos"}
        forms.update(ensure_forms(self.name, wanted, self.peers, outcomes, src,
                                  opts.data, opts.workers))
        for record in forms.values():
            warm_page_cache(sorted(Path(record["path"]).rglob("*")))
        smoke = {"batch": 16, "warmup": 0, "epochs": 1} if opts.smoke else {}
        return {"photos": photo_stats(src), "forms": forms, "workers": opts.workers,
                "repeats": opts.repeats, "batch": 256, "warmup": 1, "epochs": 2, **smoke}

    def job(self, peer: Peer, meta: dict[str, Any], opts: Options, run_dir: Path) -> Job:
        return Job(meta["forms"][peer.tag]["path"], meta["workers"], meta["epochs"],
                   meta["warmup"], batch=meta["batch"])

    def attempt(self, peer: Peer, job: Any, run_dir: Path, opts: Options) -> Record:
        if peer.name == "ffcv":  # its own venv
            return ffcv.run_one(job, run_dir)
        return super().attempt(peer, job, run_dir, opts)

    def progress(self, peer: Peer, run: Record) -> str:
        return f"{run['rate']:,.0f} images/s (other work: {run['others_cores']:.2f} cores)"

    def panels(self, result: GroupResult) -> list[Panel]:
        meta = result.meta
        entries = [Entry(p.name, p.label, result.outcomes[p.name].status,
                         [r["rate"] for r in result.outcomes[p.name].runs], p.ours,
                         p.reference) for p in result.peers
                   if not result.outcomes[p.name].status.startswith("not run")]
        job = (f"{meta['photos']['count']} JPEG photos → random-resized crop {CROP} + flip → "
               f"uint8 batches of {meta['batch']}, {meta['workers']} workers, "
               f"{meta['epochs']} measured epoch(s) per run.")
        return [Panel("images", self.title, "images/s", entries, "datapipe", "torch", job=job)]

    def details(self, result: GroupResult) -> list[str]:
        return ["## Goals", "", "Per image/s: " + "; ".join(goal_parts(result, "rate")) + ".",
                "", "Per CPU-second (steadier when other work shares the cores): "
                + "; ".join(goal_parts(result, "cpu_rate")) + ".", "", "## Every tool", "",
                markdown_table(["tool", "reads", "images/s", "datapipe ÷ tool", "÷ ceiling",
                                "images/CPU-s", "first epoch images/s", "start-up s",
                                "runs images/s"], self.rows(result)),
                "", *[f"- {line}" for line in notes(result)]]

    def rows(self, result: GroupResult) -> list[list[str]]:
        ours, ceiling = result.median("datapipe", "rate"), result.median("ceiling", "rate")
        rows = []
        for p in result.peers:
            outcome, theirs = result.outcomes[p.name], result.median(p.name, "rate")
            if theirs is None:
                rows.append([p.label, FORM_LABELS[p.tag], outcome.status, *[""] * 6])
                continue
            loader = p.name != "ceiling"  # the ceiling has no epochs or start-up
            first = result.median(p.name, "first_epoch_rate") if loader else None
            per_cpu = result.median(p.name, "cpu_rate")
            rows.append([p.label, FORM_LABELS[p.tag], f"{theirs:,.0f}", ratio(ours, theirs),
                         ratio(theirs, ceiling, ""), f"{per_cpu:,.0f}" if per_cpu else "–",
                         f"{first:,.0f}" if first else "",
                         f"{result.median(p.name, 'start_s'):.1f}" if loader else "",
                         " / ".join(f"{r['rate']:,.0f}" for r in outcome.runs)])
        return rows


def goal_parts(result: GroupResult, key: str) -> list[str]:
    """datapipe against each goal, by images/s ("rate") or per CPU-second ("cpu_rate")."""
    ours, parts = result.median("datapipe", key), []
    labels = {p.name: p.label for p in GROUP.peers}
    for name, goal in GOALS.items():
        theirs = result.median(name, key)
        parts.append(f"{ours / theirs:.2f}× {labels[name]} "
                     f"({goal_verdict(goal, ours / theirs >= goal)})" if ours and theirs
                     else f"{labels[name]}: {result.outcomes[name].status}")
    ceiling = result.median("ceiling", key)
    parts.append(f"{ours / ceiling:.2f} of the decode-only ceiling "
                 f"({goal_verdict(CEILING_GOAL, ours / ceiling >= CEILING_GOAL, '')})"
                 if ours and ceiling else f"ceiling: {result.outcomes['ceiling'].status}")
    return parts


def notes(result: GroupResult) -> list[str]:
    meta = result.meta
    forms, count = meta["forms"], meta["photos"]["count"]
    made = ", ".join(f"{name} {forms[name]['bytes'] / 1e6:.1f} MB (made in "
                     f"{forms[name]['seconds']:.0f} s)" for name in sorted(forms)
                     if name != "photos")
    clocked = (f"{meta['epochs']} epochs, clocked from its first batch" if not meta["warmup"]
               else f"{meta['warmup']} warm-up and {meta['epochs']} measured epochs, clocked "
               "from the warm-up's last batch")
    lines = [
        f"Each run: a fresh process iterating {clocked}. Start-up s: from creating the loader "
        "to its first batch (workers, DALI build, shard index; imports excluded). First epoch "
        "images/s: the first epoch alone, from its first batch on. ÷ ceiling: the tool's "
        "images/s over the ceiling's. images/CPU-s: images per CPU-second of the tool's whole "
        "process tree over the same batches; unlike images/s it hardly changes when other "
        "work takes cores, but it does not show a tool that leaves cores idle.",
        "torch and DALI read the original photos; WebDataset, LitData and datapipe read the "
        f"same photos re-encoded at shorter side 256, JPEG q90 (identical bytes). {made}; "
        "not timed.",
        f"DALI runs fixed-size batches: the last batch of each epoch is padded to "
        f"{meta['batch']} with copies of one sample ({-count % meta['batch']} decoded and "
        "dropped per epoch), the price of DALI's reader.",
    ]
    for name, outcome in result.outcomes.items():
        counts = {n for r in outcome.runs for n in r.get("epoch_images", [count])}
        if counts - {count}:
            lines.append(f"{name} delivered {sorted(counts)} images per epoch, not {count}.")
    return lines


GROUP = ImagesGroup()
