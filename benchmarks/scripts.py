"""What the scripts left in benchmarks/ share beyond datapipe.suite: their folders (under the
current directory, as `datapipe bench --suite` keeps them), --photos, and saving a report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from datapipe.suite.fixtures import ensure_photos

ROOT = Path(__file__).resolve().parent.parent  # the checkout these scripts run from
BENCH_DATA = Path("bench-data")
BENCH_RESULTS = Path("bench-results")


def photos(given: Path | None, count: int) -> Path:
    """--photos if given (an ImageFolder), else bench-data/photos-COUNT, made if missing."""
    if given is not None and not given.is_dir():
        raise SystemExit(f"--photos {given}: not a directory")
    return given or ensure_photos(BENCH_DATA, count)


def publish(stem: str, report: str, data: dict[str, Any],
            timings: tuple[float, float] | None = None) -> None:
    """Print the report, save it and `data` as bench-results/STEM.md and .json, say where
    (and, given `timings`, the seconds spent on the inputs and on the runs)."""
    print("\n" + report)
    BENCH_RESULTS.mkdir(parents=True, exist_ok=True)
    md, js = BENCH_RESULTS / f"{stem}.md", BENCH_RESULTS / f"{stem}.json"
    md.write_text(report + "\n")
    js.write_text(json.dumps(data, indent=2) + "\n")
    spent = f" (inputs {timings[0]:.0f} s, runs {timings[1]:.0f} s)" if timings else ""
    print(f"\nsaved {md} and {js}{spent}")
