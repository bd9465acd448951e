"""A self-contained HTML page (inline SVG, no scripts, no network) of the step timeline."""

from __future__ import annotations

import html
from typing import Any

WAIT, COMPUTE, PROBE, QUEUE = "#e4572e", "#4c78a8", "#b0b0b0", "#54a24b"
W, H, PAD = 900, 220, 40


def _scale(timeline: list[dict[str, Any]]) -> float:
    """The y-scale: steady steps and probes; the first step (start-up) would flatten them."""
    rest = [s["seconds"] for s in timeline if not s.get("first")]
    return max(rest or [s["seconds"] for s in timeline]) or 1.0


def _bars(timeline: list[dict[str, Any]]) -> str:
    if not timeline:
        return "<p>No steps were recorded.</p>"
    top, span = _scale(timeline), H - 2 * PAD
    bw = (W - 2 * PAD) / len(timeline)
    parts = []
    for i, s in enumerate(timeline):
        x = PAD + i * bw
        shown = min(s["seconds"], top)  # a step off the scale is drawn cut to its top
        total = shown / top * span
        wait = s["wait"] * (shown / s["seconds"] if s["seconds"] else 0.0) / top * span
        colour = COMPUTE if s["kind"] == "normal" else PROBE
        parts.append(f'<rect x="{x:.1f}" y="{H - PAD - total:.1f}" width="{max(bw - 1, 1):.1f}" '
                     f'height="{max(total - wait, 0):.1f}" fill="{colour}"><title>step '
                     f'{s["step"]} ({s["kind"]}): {s["seconds"] * 1000:.1f} ms, waiting '
                     f'{s["wait"] * 1000:.1f} ms</title></rect>')
        parts.append(f'<rect x="{x:.1f}" y="{H - PAD - wait:.1f}" width="{max(bw - 1, 1):.1f}" '
                     f'height="{wait:.1f}" fill="{WAIT}"/>')
        if s.get("first"):
            off = " (off scale)" if s["seconds"] > top else ""
            parts.append(f'<text x="{x + 2:.1f}" y="{PAD - 8}" font-size="11">first step: '
                         f'{s["seconds"] * 1000:.0f} ms, start-up, not in the figures{off}'
                         '</text>')
    axis = (f'<text x="4" y="{PAD + 4}" font-size="11">{top * 1000:.0f} ms</text>'
            f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#333"/>'
            f'<text x="{W / 2}" y="{H - 10}" font-size="11" text-anchor="middle">step</text>')
    return f'<svg width="{W}" height="{H}">{axis}{"".join(parts)}</svg>'


def _gpu_lane(timeline: list[dict[str, Any]]) -> str:
    """Per step, the device's share idle for want of data (red) and the rest (blue)."""
    if not any(s.get("device") for s in timeline):
        return "<p>No device timings (no CUDA in this process): the bars above are host-side.</p>"
    bw, lane = (W - 2 * PAD) / len(timeline), 24
    parts = [f'<text x="4" y="{lane - 8}" font-size="11">GPU</text>']
    for i, s in enumerate(timeline):
        device = s.get("device")
        if not device or device["seconds"] <= 0:
            continue
        x, idle = PAD + i * bw, min(1.0, device["wait"] / device["seconds"])
        parts.append(f'<rect x="{x:.1f}" y="0" width="{max(bw - 1, 1):.1f}" height="{lane}" '
                     f'fill="{COMPUTE}"><title>step {s["step"]} on the GPU: '
                     f'{device["seconds"] * 1000:.1f} ms, idle for data '
                     f'{device["wait"] * 1000:.1f} ms</title></rect>')
        parts.append(f'<rect x="{x:.1f}" y="0" width="{max(bw - 1, 1):.1f}" '
                     f'height="{idle * lane:.1f}" fill="{WAIT}"/>')
    return f'<svg width="{W}" height="{lane}">{"".join(parts)}</svg>'


def _queue(timeline: list[dict[str, Any]], capacity: int) -> str:
    points = [(i, s["queue"]) for i, s in enumerate(timeline) if s["queue"] is not None]
    if not points or not capacity:
        return "<p>No queue depth for this iterable (workers report it).</p>"
    sx = (W - 2 * PAD) / max(1, len(timeline) - 1)
    sy = (H - 2 * PAD) / capacity
    path = " ".join(f"{PAD + i * sx:.1f},{H - PAD - q * sy:.1f}" for i, q in points)
    return (f'<svg width="{W}" height="{H}"><polyline points="{path}" fill="none" '
            f'stroke="{QUEUE}" stroke-width="2"/><line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" '
            f'y2="{H - PAD}" stroke="#333"/><text x="4" y="{PAD - 8}" font-size="11">'
            f'{capacity} ready (full)</text></svg>')


def _hbars(seconds: dict[str, float], empty: str) -> str:
    if not seconds:
        return f"<p>{empty}</p>"
    top = max(seconds.values()) or 1.0
    rows = []
    for i, (name, value) in enumerate(sorted(seconds.items(), key=lambda kv: -kv[1])):
        width = value / top * (W - 260)
        rows.append(f'<text x="4" y="{24 + i * 26}" font-size="12">{html.escape(name)}</text>'
                    f'<rect x="150" y="{10 + i * 26}" width="{width:.1f}" height="18" '
                    f'fill="{COMPUTE}"/><text x="{156 + width:.1f}" y="{24 + i * 26}" '
                    f'font-size="12">{value:.2f} s</text>')
    return f'<svg width="{W}" height="{20 + 26 * len(seconds)}">{"".join(rows)}</svg>'


def _stages(r: dict[str, Any]) -> str:
    """Worker stages in wall time (divided by the workers busy at once), main-process ones."""
    stages = {**r["stages"]["worker_wall_seconds"], **{f"{k} (main)": v for k, v in
                                                       r["stages"]["main_seconds"].items()}}
    return _hbars(stages, "No stage times for this iterable.")


def timeline_page(r: dict[str, Any]) -> str:
    capacity = (r["queue"] or {}).get("capacity", 0)
    source = "GPU idle time, CUDA events" if r["timing"] == "device" else "host-side waiting"
    agreement = r["probes"].get("oracle")
    oracle = f"<p>{html.escape(agreement['text'])}</p>" if agreement else ""
    legend = (f'<span style="color:{WAIT}">&#9632; waiting for data</span> &nbsp; '
              f'<span style="color:{COMPUTE}">&#9632; computing</span> &nbsp; '
              f'<span style="color:{PROBE}">&#9632; probe steps (oracle / 2x batch)</span>')
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>datapipe profile</title>
<style>body{{font-family:sans-serif;margin:24px;max-width:{W + 40}px}}h2{{font-size:16px}}</style>
</head><body><h1 style="font-size:20px">{html.escape(r['verdict']['text'])}</h1>
{oracle}<p>Exposed input fraction {r['exposed_input_fraction']:.1%} ({source}) over {r['steps']}
steps of {html.escape(r['source'])}; step p50 {r['step_seconds']['p50'] * 1000:.1f} ms.</p>
<h2>Each step: waiting vs computing</h2><p>{legend}</p>{_bars(r['timeline'])}
<h2>GPU: idle for want of data (red) vs the rest of the step (CUDA events)</h2>
{_gpu_lane(r['timeline'])}
<h2>Prefetch queue: batches ready when the loop asked</h2>{_queue(r['timeline'], capacity)}
<h2>Waiting blamed on (the critical path at each request)</h2>
{_hbars(r['critical_path']['seconds'], "No waiting to blame.")}
<h2>Loader time by stage (wall seconds)</h2>{_stages(r)}</body></html>
"""
