"""A dataset's total patch count under a preset's resize rule, kept beside its shards.

A mixture by patches needs each source's total, which is a pass over every image's stored size
(~0.4 s per million images). It is made once per node and kept in a small file named by the
dataset's manifest and the geometry (a reconverted dataset, or another preset, gets another), so
a loader's start-up does not grow with the corpus."""

from __future__ import annotations

import json
from pathlib import Path

from datapipe.format.hashing import hash_bytes
from datapipe.format.stamped_files import write_atomically
from datapipe.loader.patch_epochs import PatchCounts

PREFIX = ".datapipe-patch-total-"


def patch_total(directory: Path, manifest_digest: str, counts: PatchCounts) -> int:
    """Every image's patches summed: read from the node's file (in the dataset's `directory`,
    named by its `manifest_digest`) when it is there and holds this many images, else counted
    and saved (best effort: a read-only directory keeps no file)."""
    geometry = hash_bytes(repr(counts.geometry).encode()).split(":")[1][:16]
    path = directory / f"{PREFIX}{manifest_digest.split(':')[1][:16]}-{geometry}.json"
    try:
        saved = json.loads(path.read_text())
        if saved["images"] == len(counts) and isinstance(saved["patches"], int):
            return saved["patches"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    total = counts.total()
    write_atomically(path, json.dumps({"images": len(counts), "patches": total}).encode())
    return total

