"""What the examples can write for a check: the samples each step saw, one JSON line per batch.

    {"stage": "train", "epoch": 0, "step": 3, "index": [...], "pid": 1234, "workers": [...]}

`stage` is "train", "val" or "sanity" (Lightning's check before training); `index` holds the
batch's sample (or document) ids, padding left out; `workers` the loader's worker pids, so that
a test can tell whether any outlived the script. Lines are flushed one by one: a process killed
mid-run leaves every batch it finished.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch


def real_ids(batch: dict[str, Any]) -> list[int]:
    """The batch's sample ids without the padding that evens out ranks (images flag samples,
    token batches the whole batch)."""
    index, pad = batch["index"], batch["is_padding"]
    if isinstance(pad, torch.Tensor):
        return index[~pad].tolist()
    return [] if pad else index.tolist()


class Recorder:
    """Appends a line per batch to `path` (nothing when `path` is None)."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self._file = open(path, "a") if path else None  # noqa: SIM115 (lives with the run)

    def batch(self, stage: str, epoch: int, step: int, ids: list[int],
              workers: list[int] | None = None) -> None:
        if self._file is None:
            return
        line = {"stage": stage, "epoch": epoch, "step": step, "index": ids, "pid": os.getpid()}
        if workers:
            line["workers"] = workers
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line]
