"""`datapipe inspect` and `datapipe verify`: what a dataset holds, and whether it is intact."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from datapipe.errors import DataError
from datapipe.format.dataset import Dataset
from datapipe.format.integrity import open_checked
from datapipe.format.manifest import MANIFEST_NAME, Manifest
from datapipe.format.sample_checks import check_samples
from datapipe.format.shard_reader import verify_hint
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
    name: str  # a shard's, or the manifest's
    problem: str


# The columns each loader reads, by dataset kind, and what they must be. A table (written by
# DatasetWriter with neither an image nor a tokens column) is read by Dataset alone.
_NEEDED = {"images": {"image": "bytes", "label": "scalar", "height": "scalar", "width": "scalar"},
           "text": {"tokens": "tokens", "length": "scalar"}, "table": {}}


def verify(directory: str | Path | Location,
           progress: Any = None) -> tuple[Manifest, list[ShardProblem]]:
    """Check the dataset as every reader would: each shard's bytes against the manifest's
    hash, then what a loader checks on opening it and on reading its samples. Returns the
    problems found, the first of each shard (none: intact). A remote dataset's objects are
    hashed as they stream into the cache, as a loader's are."""
    source = open_source(directory)
    manifest = source.load_manifest()
    problems = [ShardProblem(MANIFEST_NAME, p) for p in _manifest_problems(manifest)]
    starts = np.concatenate([[0], np.cumsum([s.rows for s in manifest.shards])])
    for k, shard in enumerate(manifest.shards):
        problem = source.hash_problem(shard) or _reader_problem(source, manifest, k,
                                                                int(starts[k]))
        if problem is not None:
            problems.append(ShardProblem(shard.name, problem))
        if progress is not None:
            progress(shard.bytes)
    return manifest, problems


def _manifest_problems(manifest: Manifest) -> list[str]:
    """What is wrong in the manifest itself: a kind the loaders do not read, a column they
    read absent or of a type they cannot, a sample count that is not its shards' rows."""
    problems = _count_problems(manifest)
    needed = _NEEDED.get(manifest.kind)
    if needed is None:
        return [*problems, f"kind {manifest.kind!r} is neither of {sorted(_NEEDED)}"]
    stored = {c.name: c for c in manifest.columns}
    for name, wanted in needed.items():
        column = stored.get(name)
        if column is None or wanted != ("scalar" if column.is_scalar else
                                        "tokens" if column.is_tokens else column.type):
            problems.append(f"a {manifest.kind} dataset needs a {wanted} column {name!r}; the "
                            f"manifest has {column.type if column else 'none'}")
    return problems


def _count_problems(manifest: Manifest) -> list[str]:
    """The file's num_samples against the rows of its shards (what every reader counts)."""
    stated, counted = manifest.stated_samples, manifest.num_samples
    if stated is None or (type(stated) is int and stated == counted):
        return []
    shards = len(manifest.shards)
    return [f"num_samples is {stated!r}, but its {shards} shard{'s' if shards != 1 else ''} "
            f"hold {counted:,} samples (the sum of their rows)"]


def _reader_problem(source: Any, manifest: Manifest, k: int, first_sample: int) -> str | None:
    """What a loader would refuse in shard k, whose bytes are intact (None: nothing)."""
    info = manifest.shards[k]
    where, dataset = source.where(info.name), str(source.location)
    file = source.open(info, "cheap")
    try:
        reader = open_checked(file.path, manifest, k, first_sample, where, dataset)
        try:
            check_samples(reader, manifest)
        finally:
            reader.close()
    except DataError as exc:  # one line naming the shard: keep what follows its name
        text = str(exc).removesuffix(" " + verify_hint(dataset))
        return text.removeprefix(f"{where}: ").removeprefix(f"{where} ")
    finally:
        file.release()
    return None


def length_histogram(directory: str | Path | Location, bins: int = 10) -> dict[str, int]:
    """Samples per length range ("LO-HI", inclusive), the ranges growing geometrically: token
    lengths span orders of magnitude."""
    with Dataset(directory) as ds:
        lengths = ds.scalar("length")
    edges = np.unique(np.geomspace(max(1, lengths.min()), lengths.max() + 1,
                                   bins + 1).astype(int))
    counts, _ = np.histogram(lengths, bins=edges)
    return {f"{a}-{b - 1}": int(c) for a, b, c in zip(edges, edges[1:], counts, strict=False)}
