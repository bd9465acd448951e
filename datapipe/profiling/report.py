"""The profile's outputs: a terminal report (verdict first), JSON, a trace and a page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from datapipe.profiling.figures import figure_rows
from datapipe.profiling.settings import ProfileSettings
from datapipe.profiling.verdict import mark_incomplete


def render_text(r: dict[str, Any]) -> str:
    lines = [f"datapipe profile: {r['verdict']['text']}"]
    if r["verdict"].get("next"):
        lines.append(f"  next: {r['verdict']['next']}")
    oracle = r["probes"].get("oracle")
    if oracle and not r["incomplete"]:
        lines.append(f"  {oracle['text']}")
    rows = figure_rows(r)
    width = max(len(k) for k, _ in rows)
    lines += [""] + [f"  {k:<{width}}  {v}" for k, v in rows]
    lines += [f"  note: {n}" for n in r["notes"]]
    return "\n".join(lines)


def save_outputs(results: dict[str, Any], settings: ProfileSettings) -> None:
    if settings.report:
        Path(settings.report).write_text(json.dumps(results, indent=1, default=float) + "\n")
    if settings.trace:
        from datapipe.profiling.trace import chrome_trace

        Path(settings.trace).write_text(json.dumps(chrome_trace(results)))
    if settings.html:
        from datapipe.profiling.plot import timeline_page

        Path(settings.html).write_text(timeline_page(results))


def withdraw_verdict(settings: ProfileSettings, text_path: Path, reason: str) -> str | None:
    """Rewrite a saved profile as partial (the run did not finish): the verdict withdrawn in
    every file. Returns the terminal report, or None when no profile was saved."""
    try:
        results = json.loads(Path(settings.report).read_text()) if settings.report else None
    except (OSError, ValueError):
        return None
    if not isinstance(results, dict) or "verdict" not in results:
        return None
    if results.get("incomplete"):  # what the script itself saw: "raised RuntimeError"
        reason = f"{reason}: {results['incomplete']}"
    results = mark_incomplete(results, reason)
    save_outputs(results, settings)
    text = render_text(results)
    text_path.write_text(text + "\n")
    return text
