"""Small text datasets written with `dp.DatasetWriter`, for the loader's tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import datapipe as dp


def write_documents(path: Path, lengths: list[int], vocab: int = 64, seed: int = 0,
                    loss_masks: list[np.ndarray] | None = None,
                    shard_format: str = "arrow", shard_size: str = "256MB") -> list[np.ndarray]:
    """Documents of random ids below `vocab`, of these lengths (with a `loss_mask` column when
    given); returns their ids."""
    rng = np.random.default_rng(seed)
    documents = [rng.integers(0, vocab, n).astype(np.uint16) for n in lengths]
    columns = {"tokens": "uint16[]"}
    if loss_masks is not None:
        columns["loss_mask"] = "uint8[]"
    with dp.DatasetWriter(path, columns, shard_format=shard_format,
                          shard_size=shard_size) as writer:
        for i, ids in enumerate(documents):
            sample = {"tokens": ids}
            if loss_masks is not None:
                sample["loss_mask"] = loss_masks[i]
            writer.write(sample)
    return documents
