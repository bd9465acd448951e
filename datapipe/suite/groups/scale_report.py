"""The scale group's report (scale.py): each row's figures at each corpus size, the goals of
plans that do not grow with the corpus judged on them, a straight-line extrapolation to 10^9,
and a chart of time and memory against corpus size on log axes.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from datapipe.suite.charts import OURS_COLOUR, PEER_COLOUR, caption
from datapipe.suite.groups import scale_peers as sp
from datapipe.suite.report import Entry, Panel, markdown_table
from datapipe.suite.runner import BEFORE, GroupResult, Outcome, Peer, Record

EXTRAPOLATE_TO = 10**9
GOAL_SIZE = {"tokens": 10**8, "images": 10**7}  # where the goals are judged (smoke: largest)
GOAL_SECONDS, GOAL_GROWTH_MB = 1.0, 300.0
# Rank 0 of 8 "no dearer" than rank 0 of 1: within 10 %, or within what a busy machine moves
# a run by (a tenth of a second, 20 MB).
GOAL_RANK_SLACK, RANK_SLACK_S, RANK_SLACK_MB = 1.1, 0.1, 20.0
UNITS = {"tokens": "documents", "images": "images"}
LOADERS = {"tokens": "TokenLoader", "images": "Loader"}
CHART_COLOURS = {"w1": OURS_COLOUR, "r0of8": "#1b9e77", "mix": "#7570b3",
                 "memmap": PEER_COLOUR}


def panels(result: GroupResult) -> list[Panel]:
    """One panel per loader: the rows' first batch at the largest size measured, the goals
    in its job line."""
    panels = []
    for part, unit in UNITS.items():
        n = largest(result, part)
        entries = [Entry(p.name, p.label, result.outcomes[p.name].status,
                         values(result.outcomes[p.name], n, "first_batch_s"), p.ours,
                         p.reference) for p in rows_of(result, part)]
        goals = " ".join(f"{line}." for line in goal_lines(result, part))
        panels.append(Panel(f"scale-{part}", f"{LOADERS[part]}, first batch at "
                            f"{n or 0:,} {unit}", "s", entries, f"{part}-r0of8",
                            f"{part}-w1", higher_is_better=False,
                            job=f"{goals} Every size and figure: scale.md."))
    return panels


def details(result: GroupResult) -> list[str]:
    """Per loader: the goals, every size's figures, the extrapolation and the chart."""
    meta, lines = result.meta, []
    for part, unit in UNITS.items():
        if part not in meta["corpora"]:
            continue
        lines += [f"## {LOADERS[part]}", "", *[f"- {g}" for g in goal_lines(result, part)],
                  "", markdown_table(["row", unit, "construct s", "first batch s",
                                      "training process MB", "workers MB",
                                      "resume, first batch s"], table(result, part)), "",
                  f"Extrapolated to {EXTRAPOLATE_TO:,} {unit} (not measured: a straight "
                  "line through the last two or three sizes, least squares):", "",
                  markdown_table(["row", "first batch s", "resume, first batch s",
                                  "private MB", f"first batch µs per {unit[:-1]}",
                                  f"private bytes per {unit[:-1]}"],
                                 extrapolations(result, part)), ""]
        if part in meta.get("charts", {}):
            lines += [f"![{LOADERS[part]} against corpus size]({meta['charts'][part]})", ""]
    return [*lines, *[f"- {note}" for note in notes(meta)]]


# ---------------------------------------------------------------- figures


def memory(run: Record) -> float:
    return run["training_mb"] + run["workers_mb"]


def short(n: int) -> str:
    """100k, 1M, 10M, 1B: a corpus size in a progress line or chart."""
    for scale, suffix in ((10**9, "B"), (10**6, "M"), (10**3, "k")):
        if n >= scale:
            return f"{n // scale}{suffix}"
    return str(n)


def values(outcome: Outcome, n: int | None, key: str) -> list[float]:
    """The runs' figure `key` (or "memory_mb") at size n, where they measured it."""
    runs = [r["sizes"].get(str(n), {}) for r in outcome.runs] if outcome.status == "ok" else []
    return [memory(r) if key == "memory_mb" else r[key] for r in runs if "first_batch_s" in r]


def median_at(outcome: Outcome, n: int, key: str) -> float | None:
    return statistics.median(found) if (found := values(outcome, n, key)) else None


def rows_of(result: GroupResult, part: str) -> list[Peer]:
    return [p for p in result.peers if p.tag == part]  # in order, --before's included


def measured(result: GroupResult, name: str, key: str) -> list[tuple[int, float]]:
    """(size, median) of row `name`'s figure at every size it measured."""
    part = name.split("-")[0]
    return [(n, v) for n in result.meta["sizes"][part]
            if (v := median_at(result.outcomes[name], n, key)) is not None]


def largest(result: GroupResult, part: str) -> int | None:
    """The largest size any row of `part` measured."""
    return max((n for p in rows_of(result, part) for n, _ in
                measured(result, p.name, "first_batch_s")), default=None)


def slope(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """(figure per sample, figure at no samples) of the least-squares line through the last
    three (or two) points; None with fewer than two."""
    import numpy as np

    if len(points) < 2:
        return None
    sizes, figures = zip(*points[-3:], strict=True)
    per, offset = np.polyfit(np.asarray(sizes, float), np.asarray(figures, float), 1)
    return float(per), float(offset)


def extrapolate(points: list[tuple[int, float]], to: int = EXTRAPOLATE_TO) -> float | None:
    """slope()'s line at `to`, never below the last point (a cost does not shrink as the
    corpus grows)."""
    line = slope(points)
    return None if line is None else max(line[0] * to + line[1], points[-1][1])


# ---------------------------------------------------------------- goals and tables


def at_size(result: GroupResult, name: str, key: str, n: int) -> str:
    """A row's figure at size n, or where it stopped and the extrapolation to n."""
    points = measured(result, name, key)
    found = dict(points).get(n)
    if found is not None:
        return f"{found:.2f}"
    if not points:
        return result.outcomes[name].status
    guess = extrapolate(points, n)
    extrapolated = f"; extrapolated: {guess:,.2f}" if guess is not None else ""
    return f"not measured (at {points[-1][0]:,}: {points[-1][1]:.2f}{extrapolated})"


def goal_lines(result: GroupResult, part: str) -> list[str]:
    """Each goal and every datapipe row's figure against it, met or NOT met."""
    sizes, ours = result.meta["sizes"][part], [p for p in rows_of(result, part) if p.ours]
    target = result.meta["goal_sizes"][part]
    lines = []
    for key, what in (("first_batch_s", "first batch"), ("resume_s", "resume, first batch")):
        parts = [f"{p.name} {at_size(result, p.name, key, target)}"
                 + verdict(dict(measured(result, p.name, key)).get(target), GOAL_SECONDS)
                 for p in ours]
        lines.append(f"{what} ≤ {GOAL_SECONDS:g} s at {target:,} {UNITS[part]}: "
                     + ", ".join(parts))
    growth = [f"{p.name} {growth_at(result, p.name, sizes[0], target)}" for p in ours]
    lines.append(f"private memory at {target:,} ≤ {GOAL_GROWTH_MB:g} MB beyond that at "
                 f"{sizes[0]:,}: " + ", ".join(growth))
    return [*lines, *[rank_line(result, one, p.name) for p in ours
                      if (one := p.name.replace("r0of8", "w1")) != p.name]]


def growth_at(result: GroupResult, name: str, first: int, target: int) -> str:
    """A row's memory at `target` beyond that at `first`, judged; or where it stopped and the
    extrapolation to `target`."""
    points = measured(result, name, "memory_mb")
    base, found = dict(points).get(first), dict(points).get(target)
    if base is None:
        return "not measured"
    if found is not None:
        return f"{found - base:+,.0f} MB" + verdict(found - base, GOAL_GROWTH_MB)
    guess = extrapolate(points, target)
    return (f"not measured (at {points[-1][0]:,}: {points[-1][1] - base:+,.0f} MB" +
            (f"; extrapolated: {guess - base:+,.0f} MB" if guess is not None else "") + ")")


def verdict(value: float | None, most: float) -> str:
    return "" if value is None else f" ({'met' if value <= most else 'NOT met'})"


def rank_line(result: GroupResult, one: str, eight: str) -> str:
    """Rank 0 of 8 against rank 0 of 1 at the largest size both measured."""
    both = [n for n, _ in measured(result, eight, "first_batch_s")
            if n in dict(measured(result, one, "first_batch_s"))]
    what = (f"{eight} no dearer than {one} (≤ {GOAL_RANK_SLACK:g}×, or within "
            f"{RANK_SLACK_S:g} s / {RANK_SLACK_MB:g} MB)")
    if not both:
        return f"{what}: not measured"
    parts, ok = [], True
    for key, slack in (("first_batch_s", RANK_SLACK_S), ("resume_s", RANK_SLACK_S),
                       ("memory_mb", RANK_SLACK_MB)):
        mine, theirs = (median_at(result.outcomes[name], both[-1], key) or 0.0
                        for name in (eight, one))
        ok &= mine <= theirs * GOAL_RANK_SLACK or mine - theirs <= slack
        parts.append(f"{key.rsplit('_', 1)[0].replace('_', ' ')} "
                     f"{mine / max(theirs, 1e-9):.2f}×")
    return f"{what} at {both[-1]:,}: {', '.join(parts)} ({'met' if ok else 'NOT met'})"


def table(result: GroupResult, part: str) -> list[list[str]]:
    out = []
    for p in rows_of(result, part):
        outcome = result.outcomes[p.name]
        if outcome.status != "ok":
            out.append([p.label, outcome.status, *[""] * 5])
            continue
        for n in result.meta["sizes"][part]:
            figures = [median_at(outcome, n, key) for key in (
                "construct_s", "first_batch_s", "training_mb", "workers_mb", "resume_s")]
            errors = [r["sizes"][str(n)]["error"] for r in outcome.runs
                      if "error" in r["sizes"].get(str(n), {})]
            cells = [f"{v:.3f}" if i in (0, 1, 4) else f"{v:,.0f}"
                     for i, v in enumerate(figures)] if figures[0] is not None else \
                [f"failed: {errors[0]}" if errors else "not reached", *[""] * 4]
            out.append([p.label, f"{n:,}", *cells])
    return out


def extrapolations(result: GroupResult, part: str) -> list[list[str]]:
    """Per row: first batch, resume and memory at EXTRAPOLATE_TO, and the slopes behind the
    first batch and memory (per sample: what the rows grow by)."""
    rows = []
    for p in rows_of(result, part):
        cells = [p.label]
        for key, digits in (("first_batch_s", 2), ("resume_s", 2), ("memory_mb", 0)):
            guess = extrapolate(measured(result, p.name, key))
            cells.append("–" if guess is None else f"{guess:,.{digits}f}")
        for key, scale in (("first_batch_s", 1e6), ("memory_mb", 1 << 20)):
            line = slope(measured(result, p.name, key))
            cells.append("–" if line is None else f"{line[0] * scale:,.2f}")
        rows.append(cells)
    return rows


def notes(meta: dict[str, Any]) -> list[str]:
    return [
        f"Corpora: documents of {sp.DOC_TOKENS[0]}-{sp.DOC_TOKENS[1]} random token ids "
        f"(uint16), and one {sp.IMAGE_SIDE}x{sp.IMAGE_SIDE} JPEG repeated, labelled over "
        f"{sp.CLASSES} classes: the plans depend on how many there are, not on their bytes. "
        "Written once under --data into datapipe's shard format (the manifest DatasetWriter "
        "writes), the TokenLoader's length index built once, every file page-cached.",
        f"Rows: TokenLoader layout=\"packed\", max_tokens {meta['max_tokens']:,}; Loader "
        f"batches of {meta['batch']}; both {meta['workers']} workers, shuffle=True, rank=0 and "
        "world_size 1 or 8 passed explicitly. The floor: np.memmap of the same token ids, "
        "random offsets, a batch of max_tokens in 1,024-token rows; no plan, its state the "
        "generator's.",
        "Each size of each row: a fresh process per run. construct: the loader made (imports "
        "excluded); first batch: from then to the first batch; resume, first batch: a state "
        f"saved after {sp.RESUME_AFTER} batches (fewer in a short epoch), the loader closed, a "
        "new one made, the seconds from load_state_dict to its first batch. Figures: the median "
        f"of {meta['repeats']} run(s).",
        "Private memory at the first batch: Pss_Anon + Pss_Shmem of /proc/PID/smaps_rollup, "
        "the training process and its workers. Proportional shares: a page the workers still "
        "share with the training process since the fork is split among them, so the two "
        "columns add up to the tree's memory with every page once (Anonymous counts such a "
        "page in every process; Private_* leaves it out and counts the page cache of a "
        "shard only one process maps). Page cache (Pss_File) is left out.",
    ]


# ---------------------------------------------------------------- the chart


def draw(result: GroupResult, part: str, out: Path) -> bool:
    """Time and memory against corpus size, log axes, a line per row (--before's lighter),
    dotted to its extrapolation at 10^9; the goals as grey lines. False: nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [p for p in rows_of(result, part) if measured(result, p.name, "first_batch_s")]
    if not rows:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    panes = ((axes[0], ("first_batch_s", "resume_s"), "seconds"),
             (axes[1], ("memory_mb",), "private MB (training process + workers)"))
    for ax, keys, label in panes:
        for p in rows:
            colour = CHART_COLOURS[p.name.removesuffix(BEFORE).split("-")[1]]
            for key, style in zip(keys, ("-", "--"), strict=False):
                points = measured(result, p.name, key)
                ax.plot(*zip(*points, strict=True), style, marker="o", color=colour,
                        alpha=0.45 if p.name.endswith("-before") else 1.0,
                        label=f"{p.label}{', resume' if key == 'resume_s' else ''}")
                guess = extrapolate(points)
                if guess is not None:
                    ax.plot([points[-1][0], EXTRAPOLATE_TO], [points[-1][1], guess], ":",
                            color=colour, alpha=0.5)
        smallest = measured(result, rows[0].name, "memory_mb")[0][1]
        ax.axhline(GOAL_GROWTH_MB + smallest if keys == ("memory_mb",) else GOAL_SECONDS,
                   color="#999999", linewidth=1)
        ax.set(xscale="log", yscale="log", xlabel=UNITS[part], ylabel=label)
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{LOADERS[part]}: start-up and memory against corpus size (dotted: "
                 f"extrapolated to {short(EXTRAPOLATE_TO)}; grey: the goals)")
    fig.text(0.01, 0.01, caption(result.machine), fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True
