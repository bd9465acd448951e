"""Training a transformers Llama on TokenLoader's batches, packed against padded, per attention
implementation, where torch sees a CUDA device: the suite's text corpus, a 134M-parameter
Llama (random init) in bfloat16, the same steps on each layout (hf_train_peers says how each
run goes). Packed: preset="hf", padding-free, the documents kept apart by `position_ids`
(sdpa, flex_attention) or `cu_seq_lens_q/k` (flash_attention_2). Padded: layout="padded",
rows padded to their longest document, `attention_mask`. The figure is loss-target tokens/s:
the targets that count, so the padding a layout computes shows as a lower rate.
"""

from __future__ import annotations

import math
from dataclasses import fields
from pathlib import Path
from typing import Any

from datapipe.suite.groups import hf_train_peers as hp
from datapipe.suite.groups.text_peers import suite_dataset
from datapipe.suite.options import Options
from datapipe.suite.report import Entry, Panel, markdown_table
from datapipe.suite.runner import BEFORE, Group, GroupResult, Outcome, Peer, Record, cuda_missing

SHORT = {"flash_attention_2": "fa2", "sdpa": "sdpa", "flex_attention": "flex"}
ROWS = {f"{layout}-{short}": (attn, layout) for attn, short in SHORT.items()
        for layout in hp.LAYOUTS}  # peer name -> (attention, layout)
# The job: a budget of tokens per batch and a context length as a 125M model trains with.
FULL = {"model": "llama-134m", "max_tokens": 8192, "max_seq_len": 2048, "steps": 30,
        "warmup": 5}
SMOKE = {"model": "tiny", "max_tokens": 512, "max_seq_len": 256, "steps": 3, "warmup": 1}
DEVICE = "cuda"  # tests run the group's jobs on the CPU by setting "cpu" (and the tiny model)
LAYOUT_LABELS = {"packed": 'packed, preset="hf"', "padded": 'padded, labels="hf"'}


def row(name: str) -> tuple[str, str]:
    return ROWS[name.removesuffix(BEFORE)]


def measure(job: hp.TrainJob) -> Record:
    """One run in the child; a run that could not start (checked up front) is an error."""
    run = hp.train(job)
    return run if run["status"] == "ok" else {"error": run["status"]}


class HfTrainGroup(Group):
    name = report = "hf_train"
    title = "Training an HF Llama: packed against padded batches"
    job_type = hp.TrainJob
    peers = tuple(Peer(name, f"{LAYOUT_LABELS[layout]} ({attn})", measure,
                       ("transformers", *(("flash_attn",) if attn == "flash_attention_2" else ())),
                       ours=True, tag=attn)
                  for name, (attn, layout) in ROWS.items())

    def available(self, opts: Options) -> str | None:
        return cuda_missing()

    def prepare(self, opts: Options, outcomes: dict[str, Outcome]) -> dict[str, Any]:
        """The suite's tokenized corpus; each attention implementation this machine lacks is
        skipped, saying why, before any run."""
        for name, outcome in outcomes.items():
            why = hp.attention_unavailable(row(name)[0], DEVICE)
            if outcome.status == "ok" and why is not None:
                outcome.status = why
                print(f"{name}: {why}", flush=True)
        _, _, tokenizer, dataset = suite_dataset(opts.data, opts.text_mb, opts.workers)
        return {"tokens": str(dataset), "tokenizer": tokenizer, "device": DEVICE,
                "repeats": opts.repeats, **(SMOKE if opts.smoke else FULL)}

    def job(self, peer: Peer, meta: dict[str, Any], opts: Options,
            run_dir: Path) -> hp.TrainJob:
        attn, layout = row(peer.name)
        given = {f.name: meta[f.name] for f in fields(hp.TrainJob) if f.name in meta}
        return hp.TrainJob(**{**given, "attn": attn, "layout": layout})

    def progress(self, peer: Peer, run: Record) -> str:
        return hp.describe({"status": "ok", **run})

    def panels(self, result: GroupResult) -> list[Panel]:
        entries = [Entry(p.name, p.label, result.outcomes[p.name].status,
                         [r["loss_tokens_per_s"] for r in result.outcomes[p.name].runs], p.ours)
                   for p in result.peers]
        meta = result.meta
        return [Panel("hf_train", self.title, "loss-target tokens/s", entries, "packed-sdpa",
                      "padded-sdpa", job=f"{meta['model']} ({model_line(result)}), AdamW; "
                      f"{meta['max_tokens']:,} tokens per batch, documents cut at "
                      f"{meta['max_seq_len']:,}; {meta['steps']} timed steps after "
                      f"{meta['warmup']}.")]

    def details(self, result: GroupResult) -> list[str]:
        summary = summarise(result.outcomes)
        table = []
        for name, outcome in result.outcomes.items():
            attn, layout = row(name)
            s = summary.get(name)
            table.append([attn, layout, *([outcome.status, "", "", "", "", ""] if s is None else [
                f"{s['loss_tokens_per_s']:,.0f}", f"{s['step_ms_p50']:.1f}",
                f"{s['step_ms_p90']:.1f}", gigabytes(s["peak_memory_gb"]),
                f"{s['final_loss']:.3f}", ratio_text(s.get("packed_over_padded"))])])
        return [
            headline(summary), "",
            markdown_table(["attention", "layout", "loss-target tokens/s", "step p50 ms",
                            "step p90 ms", "peak GB", "final loss", "packed ÷ padded"], table),
            "", f"Each figure: the median of {result.meta['repeats']} run(s), each a fresh process "
            "building the model anew (same seed). A step: fetching the batch, forward, "
            "backward, AdamW, then waiting for the GPU; timed from the end of the step before. "
            "Loss-target tokens: the batch's `num_loss_tokens`, the labels that are not -100. "
            "Peak memory: `torch.cuda.max_memory_allocated` over the run. Weights, gradients "
            "and AdamW's state are bfloat16 (no float32 master copy): the loader's layout and "
            "the attention kernels are what is compared, not a training recipe.",
        ]


def model_line(result: GroupResult) -> str:
    """The parameters and weights' dtype the runs had, e.g. "134.1M parameters, bfloat16"."""
    seen = {(r["parameters"], r["dtype"]) for o in result.outcomes.values() for r in o.runs}
    return "; ".join(f"{count / 1e6:.1f}M parameters, {dtype}"
                     for count, dtype in sorted(seen)) or "not run"


def summarise(outcomes: dict[str, Outcome]) -> dict[str, dict[str, Any]]:
    """Per row that ran: the median of each figure over its runs; on the packed rows, their
    loss-target tokens/s over the padded row's of the same attention implementation."""
    keys = ("loss_tokens_per_s", "step_ms_p50", "step_ms_p90", "peak_memory_gb", "final_loss")
    out = {name: {key: o.median(key) for key in keys} for name, o in outcomes.items()
           if o.status == "ok" and o.runs}
    for name, s in out.items():
        padded = out.get(name.replace("packed-", "padded-", 1))
        if row(name)[1] == "packed" and padded is not None:
            s["packed_over_padded"] = s["loss_tokens_per_s"] / padded["loss_tokens_per_s"]
    return out


def gigabytes(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"  # n/a: a run on the CPU (tests)


def ratio_text(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.2f}×"


def headline(summary: dict[str, dict[str, Any]]) -> str:
    parts = [f"with {row(name)[0]}, packed batches train at {s['packed_over_padded']:.2f}× the "
             f"padded ones' loss-target tokens/s ({s['loss_tokens_per_s']:,.0f})"
             for name, s in summary.items() if "packed_over_padded" in s]
    text = "; ".join(parts) or "no attention implementation ran on both layouts"
    return f"**{text[0].upper()}{text[1:]}.**"


GROUP = HfTrainGroup()
