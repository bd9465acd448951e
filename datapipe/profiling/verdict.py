"""The verdict: input-, compute- or overhead-bound, the stage to blame, and the oracle's word."""

from __future__ import annotations

from typing import Any

from datapipe.profiling.settings import ProfileSettings

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


def _advice(blame: dict[str, Any] | None) -> str:
    if blame is None:
        return ADVICE["loader"]
    if blame["stage"] in ADVICE:
        return ADVICE[blame["stage"]]
    if blame["side"] == "main":
        return f"move {blame['stage']} off the training thread (into the workers) or make it " \
               "cheaper"
    return ADVICE["loader"]


def incomplete_verdict(reason: str, steps: int) -> dict[str, Any]:
    return {"regime": "incomplete", "severity": None, "stage": None,
            "text": f"no verdict: {reason} after {steps} steps; the figures below cover those "
                    "steps only (a partial report)"}


def mark_incomplete(result: dict[str, Any], reason: str) -> dict[str, Any]:
    """The same figures with the verdict withdrawn: the run did not finish."""
    return {**result, "incomplete": reason,
            "verdict": incomplete_verdict(reason, result.get("steps", 0))}


def verdict(result: dict[str, Any], settings: ProfileSettings) -> dict[str, Any]:
    if result["incomplete"]:
        return incomplete_verdict(result["incomplete"], result["steps"])
    if result["measured_steps"] < MIN_STEADY_STEPS:
        return {"regime": "unknown", "severity": None, "stage": None,
                "text": f"too few steps to judge: {result['steps']} recorded, and the first "
                        "(start-up) does not count; profile a longer run"}
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
                        "torch.compile or CUDA graphs."}
    tail = f" (2x batch took {growth:.2f}x the time)" if growth is not None else \
        " (run the scaling test to rule out per-step overhead)"
    return {"regime": "compute-bound", "severity": None, "stage": None,
            "text": f"compute-bound: only {exposed:.1%} of {what} waits for data{tail}. "
                    "The input pipeline is not what limits this run."}


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
                    f"Try: {_advice(blame)}."}


def _blame_text(result: dict[str, Any]) -> str:
    blame, by_request = result["blame"], result["critical_path"]["by_request"]
    if blame is None:
        return "no stage times for this iterable"
    stage, share = blame["stage"], blame["share"]
    ready, empty = by_request.get("ready", 0.0), by_request.get("empty", 0.0)
    if blame["side"] == "main":
        queue = f"; batches were ready in the prefetch queue for {ready:.0%} of the wait" \
            if ready else ""
        return f"the main process handing batches over is to blame: {stage} " \
               f"({share:.0%} of the wait){queue}"
    if blame["side"] == "workers":
        why = f"; the prefetch queue was empty for {empty:.0%} of the wait, so the workers " \
              "cannot keep up" if empty > 0.5 else ""
        return f"critical stage: {stage} ({share:.0%} of the wait){why}"
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
