"""Vision-language SFT batches: datapipe's VLMLoader (packed under 16,384 tokens) against a
torch DataLoader whose 2 workers run Qwen2-VL's processing (chat template, image processor,
placeholder expansion, tokenizer, padding collate) on the same conversations over the suite's
photos. The figures: samples/s (median of the runs), the ratio, and each one's padding
efficiency (real tokens / tokens computed).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from datapipe.suite.fixtures import build_once, ensure_photos, list_photos, warm_page_cache
from datapipe.suite.groups import vlm_peers as peers
from datapipe.suite.options import Options
from datapipe.suite.report import Entry, Panel, goal_verdict, markdown_table, ratio
from datapipe.suite.runner import Group, GroupResult, Outcome, Peer, Record
from datapipe.suite.vlm_conversations import llava_records, make_tokenizer

GOAL_RATIO = 5.0  # datapipe >= this many times the torch DataLoader + processor
GOAL_EFFICIENCY = 0.95  # datapipe's padding efficiency, at least
WORKERS = 2


def make_conversations(photos: Path, out: Path) -> None:
    """OUT/data.json (LLaVA-style, 0 to 2 photos a conversation, as many conversations as
    photos), OUT/images (a link to the photos) and OUT/tokenizer."""
    root = Path(photos)
    names = [str(Path(p).relative_to(root)) for p, _ in list_photos(root)]
    (out / "images").symlink_to(root.resolve(), target_is_directory=True)
    (out / "data.json").write_text(json.dumps(llava_records(names, len(names), seed=41)))
    make_tokenizer(out / "tokenizer")


def convert_conversations(src: Path, out: Path, workers: int) -> None:
    subprocess.run([sys.executable, "-m", "datapipe.cli", "convert", "vlm",
                    str(src / "data.json"), str(out), "--tokenizer", str(src / "tokenizer"),
                    "--image-folder", str(src / "images"), "--workers", str(workers),
                    "--overwrite"], check=True, stdout=subprocess.DEVNULL)


class VLMGroup(Group):
    name, title, report = "vlm", "Vision-language SFT batches (Qwen2-VL)", "vlm"
    job_type = peers.VLMJob
    peers = (Peer("torch-vlm", "torch DataLoader + Qwen2-VL processing, padded",
                  peers.measure_torch, ("torch", "transformers"), tag="conversations"),
             Peer("datapipe-vlm", 'datapipe VLMLoader("qwen2_vl"), packed',
                  peers.measure_datapipe, ("torch", "datapipe.loader"), ours=True,
                  tag="converted"))

    def prepare(self, opts: Options, outcomes: dict[str, Outcome]) -> dict[str, Any]:
        photos = ensure_photos(opts.data, opts.photos)
        src = build_once(opts.data / f"vlm-conversations-{opts.photos}",
                         "writing conversations over the photos ...",
                         lambda out: make_conversations(photos, out))
        data = build_once(opts.data / f"vlm-data-{opts.photos}",
                          "converting the conversations (datapipe convert vlm) ...",
                          lambda out: convert_conversations(src, out, opts.workers))
        warm_page_cache(sorted(photos.rglob("*")))
        warm_page_cache(sorted(data.rglob("*")))
        epochs = {"warmup": 0, "epochs": 1} if opts.smoke else {"warmup": 1, "epochs": 1}
        count = len(json.loads((src / "data.json").read_text()))
        return {"conversations": count, "forms": {"conversations": str(src),
                                                  "converted": str(data)},
                "workers": WORKERS, **epochs}

    def job(self, peer: Peer, meta: dict[str, Any], opts: Options,
            run_dir: Path) -> peers.VLMJob:
        return peers.VLMJob(meta["forms"][peer.tag], meta["workers"], meta["warmup"],
                            meta["epochs"])

    def progress(self, peer: Peer, run: Record) -> str:
        efficiency = f", efficiency {run['efficiency']:.3f}" if run.get("efficiency") else ""
        return (f"{run['rate']:,.0f} samples/s{efficiency} (other work: "
                f"{run['others_cores']:.2f} cores)")

    def panels(self, result: GroupResult) -> list[Panel]:
        meta = result.meta
        entries = [Entry(p.name, p.label, result.outcomes[p.name].status,
                         [r["rate"] for r in result.outcomes[p.name].runs], p.ours)
                   for p in result.peers]
        job = (f"{meta['conversations']} conversations over the suite's photos (0-2 images "
               f"each) → Qwen2-VL SFT batches, {meta['workers']} workers, {meta['epochs']} "
               "measured epoch(s) per run.")
        return [Panel("vlm-qwen2_vl", "Qwen2-VL SFT batches", "samples/s", entries,
                      "datapipe-vlm", "torch-vlm", job=job)]

    def details(self, result: GroupResult) -> list[str]:
        def figure(name: str, key: str) -> str:
            value = result.median(name, key)
            return f"{value:,.0f}" if value else "–"

        ours, theirs = (result.median(n, "rate") for n in ("datapipe-vlm", "torch-vlm"))
        rows = [[figure("datapipe-vlm", "rate"), figure("torch-vlm", "rate"),
                 ratio(ours, theirs), figure("datapipe-vlm", "cpu_rate"),
                 figure("torch-vlm", "cpu_rate"), _efficiency(result, "datapipe-vlm"),
                 _efficiency(result, "torch-vlm")]]
        return ["## Every run", "",
                markdown_table(["datapipe samples/s", "torch samples/s", "datapipe ÷ torch",
                                "datapipe samples/CPU-s", "torch samples/CPU-s",
                                "datapipe padding efficiency", "torch padding efficiency"],
                               rows),
                "", "## Goals", "", *[f"- {line}" for line in goals(result)], "",
                f"- datapipe packs under {peers.MAX_TOKENS:,} tokens; torch batches hold "
                f"{peers.TORCH_BATCH} samples padded to the longest. Efficiency: real tokens "
                "/ tokens computed, every batch but each epoch's last."]


def _efficiency(result: GroupResult, name: str) -> str:
    value = result.median(name, "efficiency")
    return f"{value:.3f}" if value else "–"


def goals(result: GroupResult) -> list[str]:
    lines = []
    ours, theirs = (result.median(n, "rate") for n in ("datapipe-vlm", "torch-vlm"))
    if ours and theirs:
        lines.append(f"{ours / theirs:.2f}× the torch DataLoader + processing "
                     f"({goal_verdict(GOAL_RATIO, ours / theirs >= GOAL_RATIO)})")
    efficiency = result.median("datapipe-vlm", "efficiency")
    if efficiency:
        lines.append(f"padding efficiency {efficiency:.3f} "
                     f"({goal_verdict(GOAL_EFFICIENCY, efficiency >= GOAL_EFFICIENCY, '')})")
    return lines


GROUP = VLMGroup()
