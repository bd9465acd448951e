"""One PNG per panel: horizontal bars of each tool's median, whiskers from its slowest to its
fastest run, datapipe's own bars highlighted, the machine and date in the caption."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from datapipe.suite.report import Panel

OURS_COLOUR = "#d95f02"
PEER_COLOUR = "#7f8c99"
REFERENCE_COLOUR = "#c8d0d8"


def caption(info: dict[str, Any]) -> str:
    return (f"{info['cpu']}, {info['cores']} cores, GPU: {info['gpu']}; {info['date']}, "
            f"commit {info['revision']}")


def bar_colour(ours: bool, reference: bool) -> str:
    return OURS_COLOUR if ours else REFERENCE_COLOUR if reference else PEER_COLOUR


def draw(panel: Panel, info: dict[str, Any], out: Path) -> Path | None:
    """Write the panel's chart to `out`; None (nothing written) when no tool has a figure."""
    import matplotlib

    matplotlib.use("Agg")  # no display: benchmarks run on servers and in CI
    import matplotlib.pyplot as plt

    ran = [e for e in panel.entries if e.ran]
    if not ran:
        return None
    ran.sort(key=lambda e: e.median, reverse=not panel.higher_is_better)  # best on top
    medians = [e.median for e in ran]
    whiskers = [[m - min(e.values) for m, e in zip(medians, ran, strict=True)],
                [max(e.values) - m for m, e in zip(medians, ran, strict=True)]]
    fig, ax = plt.subplots(figsize=(8, 1.5 + 0.45 * len(ran)))
    ax.barh(range(len(ran)), medians, xerr=whiskers, capsize=3,
            color=[bar_colour(e.ours, e.reference) for e in ran])
    ax.set_yticks(range(len(ran)), [e.label for e in ran])
    for tick, entry in zip(ax.get_yticklabels(), ran, strict=True):
        tick.set_fontweight("bold" if entry.ours else "normal")
    better = "higher is better" if panel.higher_is_better else "lower is better"
    # Two lines: beside long tool names one line ran past the figure's right edge.
    ax.set_xlabel(f"{panel.unit}, median of the runs ({better})\n"
                  "whiskers: slowest to fastest run")
    ax.set_title(panel.title)
    ax.grid(axis="x", alpha=0.3)
    fig.text(0.01, 0.01, caption(info), fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
