"""Native-resolution patch batches: datapipe's PatchLoader against a torch DataLoader whose 2
workers run transformers' image processor on PIL-decoded photos, for Qwen2-VL (packed,
16,384-patch budget, the processor's min/max pixels) and SigLIP2 NaFlex (256 patches an image,
batches of 32). Both read the suite's photos: torch the JPEG folder, datapipe the same photos
converted at their own size (`--short-side 0`); both give the processor's batch layout. The
figures: images/s (median of the runs), the ratio, and datapipe's patch efficiency.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from datapipe.suite.fixtures import ensure_form, ensure_photos, photo_stats, warm_page_cache
from datapipe.suite.groups import patch_peers as peers
from datapipe.suite.options import Options
from datapipe.suite.report import Entry, Panel, goal_verdict, markdown_table, ratio
from datapipe.suite.runner import (
    BEFORE,
    CHILD_FAILURES,
    Group,
    GroupResult,
    Outcome,
    Peer,
    Record,
)

MODELS = {"qwen2_vl": "Qwen2-VL", "siglip2": "SigLIP2 NaFlex"}
GOAL_RATIO = 5.0  # datapipe >= this many times the torch DataLoader + processor
GOAL_EFFICIENCY = 0.97  # real patches / budget, packed
WORKERS = 2


def make_native(src: Path, out: Path, workers: int) -> None:
    """`datapipe convert images --short-side 0`: the photos at their own size."""
    subprocess.run([sys.executable, "-m", "datapipe.cli", "convert", "images", str(src),
                    str(out), "--short-side", "0", "--workers", str(workers)], check=True)


def _peers() -> tuple[Peer, ...]:
    made = []
    for model in MODELS:
        made.append(Peer(f"torch-{model}", "torch DataLoader + processor (PIL)",
                         peers.measure_torch, ("torch", "transformers"), tag="photos"))
        made.append(Peer(f"datapipe-{model}", f'datapipe PatchLoader("{model}")',
                         peers.measure_datapipe, ("torch", "datapipe.loader"), ours=True,
                         tag="native"))
    return tuple(made)


class PatchesGroup(Group):
    name, title, report = "patches", "Native-resolution patch batches", "patches"
    job_type = peers.PatchJob
    peers = _peers()
    forms = {"native": make_native}  # noqa: RUF012 - read only

    def prepare(self, opts: Options, outcomes: dict[str, Outcome]) -> dict[str, Any]:
        src = ensure_photos(opts.data, opts.photos)
        forms: dict[str, Any] = {"photos": {"path": str(src)}}
        try:
            forms["native"] = ensure_form(self.name, "native", src, opts.data, opts.workers)
        except CHILD_FAILURES as exc:
            for p in self.peers:
                if p.tag == "native" and outcomes[p.name].status == "ok":
                    outcomes[p.name].status = f"failed: converting the photos: {exc}"
        for record in forms.values():
            warm_page_cache(sorted(Path(record["path"]).rglob("*")))
        epochs = {"warmup": 0, "epochs": 1} if opts.smoke else {"warmup": 1, "epochs": 1}
        return {"photos": photo_stats(src), "forms": forms, "workers": WORKERS, **epochs}

    def job(self, peer: Peer, meta: dict[str, Any], opts: Options,
            run_dir: Path) -> peers.PatchJob:
        model = peer.name.removesuffix(BEFORE).split("-", 1)[1]
        return peers.PatchJob(meta["forms"][peer.tag]["path"], model, meta["workers"],
                              meta["warmup"], meta["epochs"])

    def progress(self, peer: Peer, run: Record) -> str:
        efficiency = f", efficiency {run['efficiency']:.3f}" if run.get("efficiency") else ""
        return (f"{run['rate']:,.0f} images/s{efficiency} (other work: "
                f"{run['others_cores']:.2f} cores)")

    def panels(self, result: GroupResult) -> list[Panel]:
        meta = result.meta
        panels = []
        for model, name in MODELS.items():
            entries = [Entry(p.name, p.label, result.outcomes[p.name].status,
                             [r["rate"] for r in result.outcomes[p.name].runs], p.ours)
                       for p in result.peers if p.name.removesuffix(BEFORE).endswith(model)]
            job = (f"{meta['photos']['count']} JPEG photos → {name} `pixel_values` as its "
                   f"processor makes them, {meta['workers']} workers, {meta['epochs']} "
                   "measured epoch(s) per run.")
            panels.append(Panel(f"patches-{model}", f"{name} patch batches", "images/s",
                                entries, f"datapipe-{model}", f"torch-{model}", job=job))
        return panels

    def details(self, result: GroupResult) -> list[str]:
        rows = []
        for model, name in MODELS.items():
            ours = result.median(f"datapipe-{model}", "rate")
            theirs = result.median(f"torch-{model}", "rate")
            efficiency = result.median(f"datapipe-{model}", "efficiency")
            ours_cpu = result.median(f"datapipe-{model}", "cpu_rate")
            theirs_cpu = result.median(f"torch-{model}", "cpu_rate")
            rows.append([name, _figure(ours), _figure(theirs), ratio(ours, theirs),
                         _figure(ours_cpu), _figure(theirs_cpu), ratio(ours_cpu, theirs_cpu),
                         f"{efficiency:.3f}" if efficiency else "–",
                         _figure(result.median(f"datapipe-{model}", "patches_per_image"))])
        return ["## Every run", "",
                markdown_table(["model", "datapipe images/s", "torch + processor images/s",
                                "datapipe ÷ torch", "datapipe images/CPU-s",
                                "torch images/CPU-s", "÷ per CPU-s", "patch efficiency",
                                "patches an image"], rows),
                "", "## Goals", "", *[f"- {line}" for line in goals(result)], "",
                "- Efficiency: real patches / patches budgeted, over every batch but each "
                "epoch's last (packed: / 16,384; padded: / rows x 256).",
                "- torch batches hold 12 images (Qwen2-VL, about what the budget holds here) or "
                "32 (SigLIP2); its workers decode with PIL and run the processor's PIL backend."]


def _figure(value: float | None) -> str:
    return f"{value:,.0f}" if value else "–"


def goals(result: GroupResult) -> list[str]:
    lines = []
    for model, name in MODELS.items():
        ours = result.median(f"datapipe-{model}", "rate")
        theirs = result.median(f"torch-{model}", "rate")
        if ours and theirs:
            lines.append(f"{name}: {ours / theirs:.2f}× the torch DataLoader + processor "
                         f"({goal_verdict(GOAL_RATIO, ours / theirs >= GOAL_RATIO)})")
    efficiency = result.median("datapipe-qwen2_vl", "efficiency")
    if efficiency:
        lines.append(f"Qwen2-VL packed patch efficiency {efficiency:.3f} "
                     f"({goal_verdict(GOAL_EFFICIENCY, efficiency >= GOAL_EFFICIENCY, '')})")
    return lines


GROUP = PatchesGroup()
