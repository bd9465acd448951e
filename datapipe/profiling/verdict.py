"""The verdict: input-, compute- or overhead-bound, the stage to blame, and the oracle's word."""

from __future__ import annotations

from typing import Any

from datapipe.profiling.settings import ProfileSettings
from datapipe.profiling.stage_words import stage_words
from datapipe.wording import plural

MIN_STEADY_STEPS = 2  # steps after the first (start-up) needed to say anything

ADVICE = {
    "decode": "decode on the GPU (decode='dali', device='cuda'), store raw pixels "
              "(--encoding raw) or a smaller --short-side, or add workers",
    "read": "put shards on local disk or in the page cache, or add workers",
    "collate": "use fewer extra columns, or larger batches",
    "transform": "run batch transforms on the GPU (device='cuda')",
    "pin": "let the workers write into pinned memory, so the training thread does not copy "
           "each batch",
    "copy": "keep pinned memory and non-blocking copies on a side stream (device='cuda' does "
            "both)",
    "transfer": "keep pinned memory and non-blocking copies (device='cuda' does both)",
    "device input": "keep pinned memory and non-blocking copies (device='cuda' does both), and "
                    "lighten the device-side batch transforms",
    "hand-off": "larger batches, to spread the loader's per-batch cost in the training "
                "process (receiving a batch from the workers) over more samples",
    "loader": "add workers or raise prefetch",
}
# The first of the advice to try, as a setting or command, where the workers are not simply
# too few (that case: `num_workers`, see `next_for_input`).
NEXT = {
    "decode": "`decode=\"dali\", device=\"cuda\"` (decode on the GPU), or convert with a "
              "smaller `--short-side`",
    "read": "put the shards on local disk, or read them once so they sit in the page cache",
    "collate": "larger batches (`{batch}`)",
    "transform": "`device=\"cuda\"`: batch transforms then run on the GPU",
    "hand-off": "larger batches (`{batch}`)",
    "loader": "more workers (`num_workers`) or a deeper prefetch queue (`prefetch`; "
              "DataLoader's `prefetch_factor`)",
}


def _advice(blame: dict[str, Any] | None) -> str:
    if blame is None:
        return ADVICE["loader"]
    if blame["stage"] in ADVICE:
        return ADVICE[blame["stage"]]
    if blame["side"] == "main":
        return f"move {stage_words(blame['stage'])} off the training thread (into the workers) " \
               "or make it cheaper"
    return ADVICE["loader"]


def incomplete_verdict(reason: str, steps: int) -> dict[str, Any]:
    return {"regime": "incomplete", "severity": None, "stage": None,
            "text": f"no verdict: {reason} after {plural(steps, 'step')}; the figures below "
                    "cover those steps only (a partial report)",
            "next": "make the run finish, then profile it again"}


def mark_incomplete(result: dict[str, Any], reason: str) -> dict[str, Any]:
    """The same figures with the verdict withdrawn: the run did not finish."""
    return {**result, "incomplete": reason,
            "verdict": incomplete_verdict(reason, result.get("steps", 0))}


def verdict(result: dict[str, Any], settings: ProfileSettings) -> dict[str, Any]:
    """The regime, its one-line text and `next`: the one thing to try first, as a setting or
    a command (in `backquotes`)."""
    if result["incomplete"]:
        return incomplete_verdict(result["incomplete"], result["steps"])
    if result["measured_steps"] < MIN_STEADY_STEPS:
        return {"regime": "unknown", "severity": None, "stage": None,
                "text": f"too few steps to judge: {plural(result['steps'], 'step')} recorded, "
                        "and the first (start-up) does not count; profile a longer run",
                "next": f"profile a run of at least {MIN_STEADY_STEPS + 1} steps"}
    exposed = result["exposed_input_fraction"]
    if exposed >= settings.moderately_input_bound:
        return _input_bound(result, settings, exposed)
    what = "the GPU's time" if result["timing"] == "device" else "step time"
    growth = result["probes"].get("growth_at_2x_batch")
    if growth is not None and growth < settings.overhead_growth:
        return {"regime": "overhead-bound", "severity": None, "stage": None,
                "text": f"overhead-bound: only {exposed:.1%} of {what} waits for data, and "
                        f"twice the batch took only {growth:.2f}x the step time, so per-step "
                        "overhead (Python, kernel launches) dominates. Try larger batches, "
                        "torch.compile or CUDA graphs.",
                "next": f"larger batches (`{_batch_setting(result)}`): each step's fixed cost "
                        "is then spread over more samples"}
    scaling = scaling_test_command(settings.command)
    tail = f" (2x batch took {growth:.2f}x the time)" if growth is not None else \
        f" (to rule out per-step overhead, run the scaling test: {scaling})"
    return {"regime": "compute-bound", "severity": None, "stage": None,
            "text": f"compute-bound: only {exposed:.1%} of {what} waits for data{tail}. "
                    "The input pipeline is not what limits this run.",
            "next": "nothing in the input pipeline: speed up the model's step itself" if
            growth is not None else scaling}


def scaling_test_command(command: str | None) -> str:
    """How to run the scaling test on this run: the command again under `datapipe profile
    --scaling-test`, or the in-process switch when no command is known."""
    if command:
        return f"`datapipe profile --scaling-test -- {command}`"
    return "`datapipe profile --scaling-test -- python train.py`, or " \
           "`dp.profile(scaling_test=True)` in the script"


def _input_bound(result: dict[str, Any], settings: ProfileSettings,
                 exposed: float) -> dict[str, Any]:
    severity = "highly" if exposed >= settings.highly_input_bound else "moderately"
    blame = result["blame"]
    where = f"the GPU is idle {exposed:.0%} of the time waiting for data" \
        if result["timing"] == "device" else \
        f"{exposed:.0%} of step time is spent waiting for data"
    return {"regime": "input-bound", "severity": severity,
            "stage": blame["stage"] if blame else "loader",
            "text": f"{severity} input-bound: {where}; {_blame_text(result)}. "
                    f"Try: {_advice(blame)}.",
            "next": next_for_input(result, blame)}


def next_for_input(result: dict[str, Any], blame: dict[str, Any] | None) -> str:
    """The first thing to try when input-bound: more workers where the workers cannot keep up
    and the machine has cores to spare, else the blamed stage's own remedy."""
    workers, cores = result.get("num_workers"), result.get("cores")
    side = blame["side"] if blame else "loader"
    if side in ("workers", "loader") and workers is not None and cores and workers < cores:
        return f"`num_workers={cores}` (the loader ran {plural(workers, 'worker')}, with " \
               f"{plural(cores, 'core')} for this process to use)"
    if blame is not None and blame["stage"] in NEXT:
        return NEXT[blame["stage"]].format(batch=_batch_setting(result))
    return _advice(blame)


def _batch_setting(result: dict[str, Any]) -> str:
    """What sets the batch's size: a token budget for TokenLoader, a count elsewhere."""
    return "max_tokens" if "TokenLoader" in result["source"] else "batch_size"


def _blame_text(result: dict[str, Any]) -> str:
    blame, by_request = result["blame"], result["critical_path"]["by_request"]
    if blame is None:
        return "no stage times for this iterable"
    words, share = stage_words(blame["stage"]), blame["share"]
    ready, empty = by_request.get("ready", 0.0), by_request.get("empty", 0.0)
    if blame["side"] == "main":
        queue = f"; batches were ready in the prefetch queue for {ready:.0%} of the wait" \
            if ready else ""
        return f"the training process, not the workers, is to blame: {words} " \
               f"({share:.0%} of the wait){queue}"
    if blame["side"] == "workers":
        why = f"; the prefetch queue was empty for {empty:.0%} of the wait, so the workers " \
              "cannot keep up" if empty > 0.5 else ""
        return f"critical stage: {words} ({share:.0%} of the wait){why}"
    if blame["side"] == "device":
        return f"the device waited for the batch's copy or ran input transforms for " \
               f"{share:.0%} of the wait"
    return f"{share:.0%} of the wait is inside the loader, outside any stage it times"


def oracle_agreement(implied: float, measured: float,
                     settings: ProfileSettings) -> dict[str, Any]:
    """Does a cached batch speed steps up by about the measured starvation?"""
    tolerance = max(settings.oracle_tolerance, 0.2 * max(abs(implied), measured))
    agrees = abs(implied - measured) <= tolerance
    faster = f"{implied:.1%} faster" if implied >= 0 else f"{-implied:.1%} slower"
    text = f"oracle: steps run {faster} with a cached batch — "
    if agrees:
        text += f"agrees with the measured {measured:.1%} starvation"
    elif implied > measured:
        text += f"disagrees with the measured {measured:.1%} starvation: loading slows the " \
                "steps beyond the time spent waiting (workers competing for CPU or memory?)"
    else:
        text += f"disagrees with the measured {measured:.1%} starvation: not all the waiting " \
                "delayed the steps, or the oracle's few steps were noisy (raise probe_steps)"
    return {"implied_fraction": implied, "measured_fraction": measured, "agrees": agrees,
            "text": text}
