"""`datapipe bench --suite images|text|convert|gpu|mixture|patches|scale|all`: every peer side
by side, one command.

Each suite runs its groups (gpu: the GPU loading, the training-thread hand-off and the HF
training groups; mixture: three datasets by weight against one; patches: native-resolution patch
batches against transformers' processors in a DataLoader; scale: start-up and memory
against corpus size, run only when named) on the same generated data,
the same job and worker count, in repeated rounds of fresh processes; their progress lines
show each run's figure as it ends. Written to OUT:
suite.json (the machine, every run of every tool raw and summarised, each group's own data),
suite.md (the answer first, then the tables and charts), one PNG per panel, and each group's
own detailed report (loader.md, text.md, ...). With `readme`, the PNGs also go to docs/bench/
beside that README and its marked region is rewritten from these figures and, for the suites
not run, those recorded in docs/bench/results.json by an earlier run (so the GPU suite can be
run on a GPU machine alone).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from datapipe.errors import ArgumentError
from datapipe.suite.charts import draw
from datapipe.suite.groups import load_group
from datapipe.suite.machine import describe, machine_line
from datapipe.suite.options import SUITES, Options
from datapipe.suite.report import (
    Entry,
    Panel,
    Section,
    answer,
    machine_lines,
    panel_markdown,
    readme_report,
    report,
    update_readme,
)
from datapipe.suite.runner import BEFORE, NO_CUDA, GroupResult, busy_warning, run_group
from datapipe.system import available_cores

# The groups of each suite, and the stem of each group's own report.
SUITE_GROUPS = {"images": ("images", "recipe", "pairs", "buckets"), "text": ("text",),
                "convert": ("convert",),
                "gpu": ("gpu", "handoff", "hf_train"), "mixture": ("mixture",),
                "patches": ("patches", "vlm"), "scale": ("scale",)}


def run(opts: Options) -> int:
    """Run the suites, write OUT/suite.{md,json} and the charts; 1 if a datapipe tool failed."""
    from datapipe.suite.groups import ffcv, vision

    check_skip(opts)
    if opts.workers < 1:
        opts = replace(opts, workers=available_cores())
    opts.out.mkdir(parents=True, exist_ok=True)
    info = describe()
    info["versions"]["ffcv"] = ffcv.version()  # in their own venvs
    info["versions"].update(vision.versions())
    print(f"Machine: {machine_line(info)}", flush=True)
    groups: dict[str, Any] = {}
    suites = {name: run_suite(name, opts, info, groups) for name in opts.suites}
    publish(info, suites, groups, opts)
    # A --before checkout may lack a tool of this one: its failures are reported, not fatal.
    failed = [e.label for ps in suites.values() for p in ps for e in p.entries
              if e.ours and e.status.startswith("failed") and not e.name.endswith(BEFORE)]
    for label in failed:
        print(f"datapipe failed: {label}", flush=True)
    return 1 if failed else 0


def check_skip(opts: Options) -> None:
    """Refuse, before any work, a --skip name that no group of the chosen suites knows (with
    --before, a twin's name too: skipping a peer leaves its twin to run, and the twin can be
    skipped by its own name)."""
    groups = [load_group(g) for name in opts.suites for g in SUITE_GROUPS[name]]
    known = {n for g in groups for p in g.all_peers(opts)
             for n in (p.name, p.tag, f"{g.name}:{p.name}")}
    unknown = sorted(opts.skip - known)
    if unknown:
        raise ArgumentError(f"--skip: no tool {', '.join(unknown)} in suite(s) "
                            f"{', '.join(opts.suites)}")


def run_suite(name: str, opts: Options, info: dict[str, Any],
              groups: dict[str, Any]) -> list[Panel]:
    """The suite's panels, each of its groups run and its own report written to OUT. A suite
    runs whole or not at all: where one of its groups cannot run here (the gpu suite without
    a CUDA device), its one panel says so, naming them all."""
    members = [load_group(g) for g in SUITE_GROUPS[name]]
    why_not = next(filter(None, (group.available(opts) for group in members)), None)
    if why_not is not None:
        print(f"== {name}: {why_not}", flush=True)
        names = " and ".join(group.name for group in members)
        return [Panel(name, members[0].title, "", [Entry(name, names, why_not)],
                      job=f"Would measure: {'; '.join(group.title for group in members)}.")]
    panels: list[Panel] = []
    for group in members:
        print(f"== {group.name}: {group.title}", flush=True)
        result = run_group(group, opts, info)
        group_panels = group.panels(result)
        text = group_report(group.title, result, group_panels, group.details(result))
        (opts.out / f"{group.report}.md").write_text(text)
        (opts.out / f"{group.report}.json").write_text(json.dumps(result.data(), indent=2))
        groups[group.report] = result.data()
        panels += group_panels
    return panels


def group_report(title: str, result: GroupResult, panels: list[Panel],
                 details: list[str]) -> str:
    """A group's own report: the answers, the machine, every panel's table, then the details."""
    warning = busy_warning(result.outcomes.values())
    parts = [f"# {title}", "", *[f"**{answer(p)}.**" for p in panels], "",
             *machine_lines(result.machine), ""]
    parts += [panel_markdown(p, None, 2) + "\n" for p in panels]
    parts += [*details, *([f"- {warning}"] if warning else [])]
    return "\n".join(parts).rstrip() + "\n"


def settings_line(opts: Options) -> str:
    size = "smoke-test sizes" if opts.smoke else f"{opts.photos} photos, {opts.text_mb} MB text"
    return (f"Each figure: median of {opts.repeats} run(s), each a fresh process; spread = "
            f"slowest–fastest run. {size}, {opts.workers} workers. Per-group details: "
            "loader.md, recipe.md, text.md, convert.md, gpu.md, handoff.md, hf_train.md, "
            "mixture.md, patches.md, scale.md, pairs.md, buckets.md beside this report.")


def publish(info: dict[str, Any], suites: dict[str, list[Panel]], groups: dict[str, Any],
            opts: Options) -> None:
    charts = {p.key: f"{p.key}.png" for ps in suites.values() for p in ps
              if draw(p, info, opts.out / f"{p.key}.png")}
    text = report(info, suites, charts, settings_line(opts))
    (opts.out / "suite.md").write_text(text)
    (opts.out / "suite.json").write_text(json.dumps({
        "machine": info, "options": json.loads(json.dumps(asdict(opts), default=str)),
        "suites": {n: [p.data() for p in ps] for n, ps in suites.items()},
        "groups": groups}, indent=2) + "\n")
    print("\n" + text + f"\nsaved {opts.out / 'suite.md'}, suite.json and "
          f"{len(charts)} chart(s)", flush=True)
    if opts.readme is not None:
        write_readme(info, suites, opts, opts.readme)


def write_readme(info: dict[str, Any], suites: dict[str, list[Panel]], opts: Options,
                 readme: Path) -> None:
    """README's region from these suites' results and, for the suites not run now, those an
    earlier `--readme` run recorded in docs/bench/results.json beside it: the GPU figures can
    come from a GPU machine and the rest from another, each with its machine named. A GPU
    suite that found no CUDA device keeps the GPU figures recorded before it."""
    charts_dir = readme.parent / "docs" / "bench"
    charts_dir.mkdir(parents=True, exist_ok=True)
    record = charts_dir / "results.json"
    sections = load_sections(record)
    for name, panels in suites.items():
        if name == "gpu" and panels[0].entries[0].status == NO_CUDA and name in sections:
            print("== gpu: no CUDA device here; the README keeps the GPU figures of "
                  f"{sections[name].machine['date']} ({sections[name].machine['gpu']})",
                  flush=True)
            continue
        sections[name] = Section(info, settings_line(opts), panels)
        for panel in panels:
            draw(panel, info, charts_dir / f"{panel.key}.png")
    ordered = {name: sections[name] for name in SUITES if name in sections}
    record.write_text(json.dumps({n: s.data() for n, s in ordered.items()}, indent=2) + "\n")
    prefix = Path(os.path.relpath(charts_dir, readme.parent)).as_posix()
    charts = {p.key: f"{prefix}/{p.key}.png" for s in ordered.values() for p in s.panels
              if (charts_dir / f"{p.key}.png").is_file()}
    update_readme(readme, readme_report(ordered, charts))
    print(f"{readme}'s benchmark region and {charts_dir} updated", flush=True)


def load_sections(record: Path) -> dict[str, Section]:
    """The suites' results an earlier `--readme` run recorded (none if there is no record)."""
    try:
        data = json.loads(record.read_text())
        return {name: Section.from_data(section) for name, section in data.items()}
    except FileNotFoundError:
        return {}
    except (ValueError, KeyError, TypeError) as exc:
        raise ArgumentError(f"{record}: not a record of benchmark results ({exc}); delete it "
                            "and rerun with --suite all --readme") from None
