"""The dataset's own columns a loader hands out in each batch beside what it makes: a label's
neighbours in an image dataset, a document's metadata in a text one. Read in the workers."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from datapipe.format.concat import ConcatDataset
from datapipe.format.dataset import Dataset
from datapipe.format.manifest import Manifest


def choose(manifest: Manifest, wanted: tuple[str, ...] | None,
           standard: set[str]) -> tuple[str, ...]:
    """`wanted`, each checked to be a column; None: every column not in `standard`."""
    if wanted is None:
        return tuple(c for c in manifest.column_names if c not in standard)
    for name in wanted:
        manifest.column(name)
    return tuple(wanted)


class ExtraColumns:
    """A worker's reader of the extra columns: scalar columns from the node's memory maps of
    them (a batch gathers its values by index; no copy per worker), the others sample by
    sample (Dataset.cells)."""

    def __init__(self, dataset: Dataset | ConcatDataset, names: tuple[str, ...]) -> None:
        self.dataset = dataset
        self.names = names
        self.scalars = {name: dataset.scalar_map(name) for name in names
                        if dataset.manifest.column(name).is_scalar}

    def of(self, indices: np.ndarray) -> dict[str, Any]:
        """Each column's values for the samples `indices`: an array (scalars, fixed-shape
        arrays stacked), or a list (strings, bytes, arrays of any length)."""
        return {name: self.scalars[name][indices] if name in self.scalars
                else self.dataset.cells(name, indices) for name in self.names}


def add_to_batch(batch: dict[str, Any], columns: dict[str, Any]) -> None:
    """The columns into the batch: arrays as tensors (no copy), lists as they are."""
    for name, value in columns.items():
        batch[name] = torch.from_numpy(value) if isinstance(value, np.ndarray) else value
