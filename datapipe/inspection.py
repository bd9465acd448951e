"""`datapipe inspect` and `datapipe verify`: what a dataset holds, and whether it is intact."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from datapipe.format.dataset import Dataset
from datapipe.format.integrity import shard_file_problem
from datapipe.format.manifest import Manifest
from datapipe.format.sources import Location, open_source


def summarize(directory: str | Path | Location) -> dict[str, Any]:
    """Counts, sizes, schema, and a label or length histogram, read from the scalar columns."""
    with Dataset(directory) as ds:
        m = ds.manifest
        summary: dict[str, Any] = {
            "path": str(directory), "kind": m.kind, "format": f"{m.shard_format} v{m.version}",
            "samples": len(ds), "shards": ds.num_shards, "bytes": m.total_bytes,
            "columns": {c.name: c.type for c in m.columns}, "settings": m.settings,
            "rejected": m.stats.get("rejected", 0),
        }
        if m.tokenizer:
            summary["tokenizer"] = m.tokenizer
        names = m.column_names
        if "label" in names:
            summary["labels"] = _label_histogram(ds.scalar("label"), m.classes)
        if "length" in names:
            summary["lengths"] = _length_stats(ds.scalar("length"))
        if "height" in names and len(ds):
            heights, widths = ds.scalar("height"), ds.scalar("width")
            summary["image_size"] = {"height": _length_stats(heights), "width":
                                     _length_stats(widths)}
    return summary


def _label_histogram(labels: np.ndarray, classes: tuple[str, ...] | None) -> dict[str, int]:
    values, counts = np.unique(labels, return_counts=True)
    def name(v: int) -> str:
        return classes[v] if classes and 0 <= v < len(classes) else str(v)
    return {name(int(v)): int(c) for v, c in zip(values, counts, strict=True)}


def _length_stats(lengths: np.ndarray) -> dict[str, float]:
    if not len(lengths):
        return {"count": 0}
    p50, p95 = np.percentile(lengths, [50, 95])
    return {"count": len(lengths), "total": int(lengths.sum()), "min": int(lengths.min()),
            "p50": float(p50), "p95": float(p95), "max": int(lengths.max()),
            "mean": float(lengths.mean())}


@dataclass(frozen=True)
class ShardProblem:
    name: str
    problem: str


def verify(directory: str | Path | Location,
           progress: Any = None) -> tuple[Manifest, list[ShardProblem]]:
    """Re-hash every shard against the manifest; returns the problems found (none = intact).
    A remote dataset's objects are hashed as they stream, not through the cache."""
    source = open_source(directory)
    manifest = source.load_manifest()
    problems = []
    for shard in manifest.shards:
        if source.remote:
            problem = source.object_problem(shard)
        else:
            problem = shard_file_problem(source.location / shard.name, shard)
        if problem is not None:
            problems.append(ShardProblem(shard.name, problem))
        if progress is not None:
            progress(shard.bytes)
    return manifest, problems
