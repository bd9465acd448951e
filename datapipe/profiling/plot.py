"""A self-contained HTML page (inline SVG, no scripts, no network) of a profile: the verdict and
the one thing to try next first, the text report's figures, then the charts behind them.

Every chart has labelled axes with units and step numbers; the figures a chart shows are the
text report's (a median line at the reported median, the queue's reported averages), and a
legend names only what is drawn. The first step (start-up) is left out of the charts as it is
left out of the figures, and the page says so with its time.
"""

from __future__ import annotations

import html
import re
from typing import Any

from datapipe.profiling.figures import figure_rows
from datapipe.profiling.stage_words import stage_words
from datapipe.profiling.svg_chart import Frame, axes, integer_ticks, nice_ticks, svg, text
from datapipe.wording import format_duration, plural

WAIT, COMPUTE, PROBE, QUEUE, MEDIAN = "#d8432a", "#4c78a8", "#a8a8a8", "#54a24b", "#222"
W, H = 900, 280
HALO = ' paint-order="stroke" stroke="#fff" stroke-width="4"'  # text readable over bars
STYLE = """body{font-family:system-ui,sans-serif;margin:24px auto;max-width:940px;color:#222}
h1{font-size:26px;margin:4px 0 6px}.lead{font-size:17px;line-height:1.6;margin:0 0 12px}
h2{font-size:16px;margin:28px 0 4px}
.source{color:#555;margin:0}.next{background:#eef4fb;border-left:4px solid #4c78a8;
padding:10px 14px;font-size:16px;line-height:1.6}code{background:#f3f3f3;padding:0 3px}
table{border-collapse:collapse;font-size:14px}td{padding:3px 12px 3px 0;vertical-align:top}
td:first-child{color:#555;white-space:nowrap}.caption{color:#444;font-size:14px;margin:2px 0}
.legend span{margin-right:18px;font-size:14px}.swatch{display:inline-block;width:12px;
height:12px;margin-right:5px;vertical-align:-1px}"""


def timeline_page(r: dict[str, Any]) -> str:
    """The whole page for the analysis result `r` (the JSON report's content)."""
    sections = [_head(r), _figures(r), _step_section(r), _queue_section(r), _gpu_section(r),
                _blame_section(r), _stage_section(r), _notes(r)]
    return ('<!doctype html><html><head><meta charset="utf-8"><title>datapipe profile: '
            f'{html.escape(r["verdict"]["regime"])}</title><style>{STYLE}</style></head>'
            f'<body>{"".join(sections)}</body></html>\n')


def _rich(words: str) -> str:
    """Plain text with `code` spans, escaped for the page."""
    parts = re.split(r"`([^`]*)`", words)
    return "".join(f"<code>{html.escape(p)}</code>" if i % 2 else html.escape(p)
                   for i, p in enumerate(parts))


def _head(r: dict[str, Any]) -> str:
    verdict = r["verdict"]
    head, _, rest = verdict["text"].partition(": ")
    out = [f'<p class="source">datapipe profile of {html.escape(r["source"] or "a loop")}</p>',
           f'<div id="verdict"><h1>{html.escape(head[:1].upper() + head[1:])}</h1>'
           f'<p class="lead">{_rich(rest)}</p></div>']
    if verdict.get("next"):
        out.append(f'<p class="next" id="next"><b>Next:</b> {_rich(verdict["next"])}</p>')
    oracle = r["probes"].get("oracle")
    if oracle and not r["incomplete"]:
        out.append(f'<p class="caption">{html.escape(oracle["text"])}</p>')
    return "".join(out)


def _figures(r: dict[str, Any]) -> str:
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>"
                   for k, v in figure_rows(r))
    return f'<h2>The figures (as in the text report)</h2><table id="figures">{rows}</table>'


def _notes(r: dict[str, Any]) -> str:
    return "".join(f'<p class="caption">Note: {html.escape(n)}</p>' for n in r["notes"])


def _legend(*entries: tuple[str, str]) -> str:
    spans = "".join(f'<span><i class="swatch" style="background:{colour}"></i>'
                    f'{html.escape(name)}</span>' for colour, name in entries)
    return f'<p class="legend">{spans}</p>'


def _time_unit(top: float) -> tuple[float, str]:
    """The unit a time axis reads in: the one its largest value is at least 1 of."""
    return next(((scale, unit) for scale, unit in ((1.0, "s"), (1e-3, "ms"))
                 if top >= scale), (1e-6, "µs"))


def _number(value: float) -> str:
    return f"{value:,.12g}"


def _drawn_steps(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The steps the charts draw: all but the first (start-up), as in the figures."""
    return [s for s in r["timeline"] if not s.get("first")]


def _step_frame(steps: list[dict[str, Any]], y1: float, height: int = H) -> Frame:
    numbers = [s["step"] for s in steps]
    return Frame(W, height, min(numbers) - 0.5, max(numbers) + 0.5, y1)


def _step_axis(frame: Frame, steps: list[dict[str, Any]], y_ticks: list[float], y_title: str,
               y_label: Any) -> str:
    numbers = [s["step"] for s in steps]
    return axes(frame, integer_ticks(min(numbers), max(numbers)), y_ticks,
                "step (in the order the loop ran them)", y_title, lambda v: f"{v:.0f}", y_label)


def _bar_width(frame: Frame) -> float:
    return max(1.0, frame.plot_width / (frame.x1 - frame.x0) * 0.8)


def _step_section(r: dict[str, Any]) -> str:
    steps = _drawn_steps(r)
    title = "<h2>Each step: waiting for data, then computing</h2>"
    if not steps:
        return title + '<p class="caption">No step after the first was recorded.</p>'
    probes = [s for s in steps if s["kind"] != "normal"]
    entries = [(WAIT, "waiting for data"), (COMPUTE, "computing (the rest of the step)")]
    if probes:
        entries.append((PROBE, "probe step (not in the figures)"))
    entries.append((MEDIAN, f"median step, {format_duration(r['step_seconds']['p50'])}"))
    return title + _step_caption(r, steps, probes) + _legend(*entries) + _step_chart(r, steps)


def _step_caption(r: dict[str, Any], steps: list[dict[str, Any]],
                  probes: list[dict[str, Any]]) -> str:
    normal = [s for s in steps if s["kind"] == "normal"]
    text_ = f"One bar per measured step ({plural(len(normal), 'step')})"
    first = r["first_step"]
    if first:
        text_ += (f"; step 0, the start-up ({format_duration(first['seconds'])}, of which "
                  f"waiting {format_duration(first['wait'])}), is left out, as in the figures")
    if probes:
        numbers = [s["step"] for s in probes]
        text_ += (f". Grey: {plural(len(probes), 'probe step')} ({min(numbers)} to "
                  f"{max(numbers)}) that replay a cached batch (oracle) or twice it (scaling "
                  "test), not in the figures")
    return f'<p class="caption">{html.escape(text_)}.</p>'


def _step_chart(r: dict[str, Any], steps: list[dict[str, Any]]) -> str:
    top = max(max(s["seconds"] for s in steps), r["step_seconds"]["p50"]) or 1e-3
    scale, unit = _time_unit(top)
    ticks = [t * scale for t in nice_ticks(top / scale)]
    frame = _step_frame(steps, ticks[-1])
    bw = _bar_width(frame)
    bars = [_step_bar(frame, s, bw) for s in steps]
    p50 = r["step_seconds"]["p50"]
    y = frame.y(p50)
    median = (f'<line x1="{frame.left}" y1="{y:.1f}" x2="{W - frame.right}" y2="{y:.1f}" '
              f'stroke="{MEDIAN}" stroke-dasharray="6 4" class="median"/>' +
              text(W - frame.right - 4, y - 5, f"median {format_duration(p50)}", anchor="end",
                   cls="median-label", extra=HALO))
    body = _step_axis(frame, steps, ticks, f"step time ({unit})",
                      lambda v: _number(v / scale)) + "".join(bars) + median
    return svg(frame, body, "step times: waiting for data and computing, per step")


def _step_bar(frame: Frame, s: dict[str, Any], bw: float) -> str:
    x, base = frame.x(s["step"]) - bw / 2, frame.y(0)
    top, waited = frame.y(s["seconds"]), frame.y(min(s["wait"], s["seconds"]))
    tip = (f"step {s['step']}: {format_duration(s['seconds'])}, of which waiting for data "
           f"{format_duration(s['wait'])}")
    if s["kind"] != "normal":
        kind = "oracle, a cached batch" if s["kind"] == "oracle" else "scaling test, 2x batch"
        return (f'<g class="step probe" data-step="{s["step"]}"><title>{tip} (probe: {kind})'
                f'</title><rect x="{x:.1f}" y="{top:.1f}" width="{bw:.1f}" '
                f'height="{base - top:.1f}" fill="{PROBE}"/></g>')
    return (f'<g class="step measured" data-step="{s["step"]}"><title>{html.escape(tip)}</title>'
            f'<rect class="compute" x="{x:.1f}" y="{top:.1f}" width="{bw:.1f}" '
            f'height="{waited - top:.1f}" fill="{COMPUTE}"/><rect class="wait" x="{x:.1f}" '
            f'y="{waited:.1f}" width="{bw:.1f}" height="{base - waited:.1f}" fill="{WAIT}"/></g>')


def _column(frame: Frame, step: int, value: float, bw: float, fill: str, cls: str,
            tip: str) -> str:
    """One step's bar from 0 to `value`, with its figures as a tooltip."""
    x, top, base = frame.x(step) - bw / 2, frame.y(value), frame.y(0)
    return (f'<rect class="{cls}" data-step="{step}" x="{x:.1f}" y="{top:.1f}" '
            f'width="{bw:.1f}" height="{base - top:.1f}" fill="{fill}"><title>'
            f'{html.escape(tip)}</title></rect>')


def _queue_section(r: dict[str, Any]) -> str:
    title = "<h2>Prefetch queue: batches ready when the loop asked</h2>"
    q = r["queue"]
    steps = [s for s in _drawn_steps(r) if s["queue"] is not None]
    if not q or not steps or not q["capacity"]:
        return title + ('<p class="caption">No queue depth for this iterable (a datapipe '
                        'loader with workers reports it).</p>')
    caption = (f"On average {q['mean_ready']:.1f} of {q['capacity']} batches were ready; the "
               f"queue was empty at {q['empty_fraction']:.0%} and full at "
               f"{q['full_fraction']:.0%} of the requests. An empty queue means the loop "
               "waited for the workers.")
    frame = _step_frame(_drawn_steps(r), q["capacity"], height=220)
    bw = _bar_width(frame)
    bars = "".join(_column(frame, s["step"], s["queue"], bw, QUEUE, "queue",
                           f"step {s['step']}: {s['queue']} of {q['capacity']} ready")
                   for s in steps)
    ticks = [float(t) for t in integer_ticks(0, q["capacity"], most=6)]
    body = _step_axis(frame, _drawn_steps(r), ticks if 0 in ticks else [0.0, *ticks],
                      "batches ready", lambda v: f"{v:.0f}") + bars
    return (title + f'<p class="caption">{html.escape(caption)}</p>' +
            _legend((QUEUE, f"batches ready (of {q['capacity']}: the queue's size)")) +
            svg(frame, body, "prefetch queue depth per step"))


def _gpu_section(r: dict[str, Any]) -> str:
    steps = [s for s in _drawn_steps(r) if s.get("device") and s["device"]["seconds"] > 0]
    if not steps:
        return ""  # the figures say why: "GPU absent" or host-side timing
    frame = _step_frame(_drawn_steps(r), 100.0, height=220)
    bw = _bar_width(frame)
    bars = []
    for s in steps:
        d = s["device"]
        share = min(100.0, 100 * d["wait"] / d["seconds"])
        bars.append(_column(frame, s["step"], share, bw, WAIT, "gpu",
                            f"step {s['step']} on the GPU: {format_duration(d['seconds'])}, "
                            f"idle for data {format_duration(d['wait'])} ({share:.0f}%)"))
    body = _step_axis(frame, _drawn_steps(r), [0, 25, 50, 75, 100],
                      "GPU idle for data (%)", lambda v: f"{v:.0f}") + "".join(bars)
    caption = (f"Per step, the share of the GPU's step spent idle for want of data (timed by "
               f"{r['device_clock']}); over the run: {r['exposed_input_fraction']:.1%}.")
    return ("<h2>GPU: idle for want of data, per step</h2>"
            f'<p class="caption">{html.escape(caption)}</p>' + svg(frame, body, caption))


def _hbars(values: dict[str, tuple[str, float]], x_title: str, label: str,
           share_of: float | None = None) -> str:
    """One horizontal bar per entry (key -> (words, seconds)), largest first, on a time axis;
    with `share_of`, each value also as a share of it."""
    rows = sorted(values.items(), key=lambda kv: -kv[1][1])
    top = max(v for _, (_, v) in rows) or 1e-6
    scale, unit = _time_unit(top)
    ticks = nice_ticks(top / scale, most=5)
    height = 24 + 28 * len(rows) + 48
    frame = Frame(W, height, 0.0, ticks[-1] * scale, 1.0, left=320, right=140, top=12)
    parts = [axes(frame, [t * scale for t in ticks], [], f"{x_title} ({unit})", "",
                  lambda v: _number(v / scale), str)]
    for i, (key, (words, seconds)) in enumerate(rows):
        y = frame.top + 8 + i * 28
        width = frame.x(seconds) - frame.left
        value = format_duration(seconds) + (f" ({seconds / share_of:.0%})" if share_of else "")
        parts.append(text(frame.left - 8, y + 14, words, anchor="end", cls="bar-label"))
        parts.append(f'<rect class="hbar" data-key="{html.escape(key)}" x="{frame.left}" '
                     f'y="{y}" width="{max(width, 1):.1f}" height="18" fill="{COMPUTE}"/>')
        parts.append(text(frame.left + width + 6, y + 14, value, cls="bar-value"))
    return svg(frame, "".join(parts), label)


def _blame_section(r: dict[str, Any]) -> str:
    title = "<h2>What the waiting is blamed on (the critical path at each request)</h2>"
    path = r["critical_path"]
    if not path["total"]:
        return title + '<p class="caption">No waiting to blame.</p>'
    values = {k: (stage_words(k), v) for k, v in path["seconds"].items()}
    caption = (f"All {format_duration(path['total'])} of waiting for data over the measured "
               "steps, split by what the loop was waiting for.")
    return (title + f'<p class="caption">{html.escape(caption)}</p>' +
            _hbars(values, "waiting", "waiting blamed per stage",
                   share_of=path["total"]))


def _stage_section(r: dict[str, Any]) -> str:
    """Worker stages in wall time (divided by the workers busy at once), and the training
    process's own."""
    stages = r["stages"]
    title = "<h2>Loader time by stage, over the whole run</h2>"
    placed = not stages["built_in_training_process"]
    values = {k: (stage_words(k, placed=placed), v)
              for k, v in stages["worker_wall_seconds"].items()}
    values.update({f"{k} (main)": (stage_words(f"{k} (main)"), v)
                   for k, v in stages["main_seconds"].items()})
    if not values:
        return title + '<p class="caption">No stage times for this iterable.</p>'
    caption = "Wall time: the workers' seconds divided by how many were busy at once " \
              f"({stages['worker_parallelism']:.1f} on average)." if placed else \
        "No workers: every stage ran in the training process."
    return (title + f'<p class="caption">{html.escape(caption)}</p>' +
            _hbars(values, "wall time", "loader time per stage"))
