"""`classes=` of dp.Loader: one class list over image datasets whose classes differ, each
dataset's labels renumbered to it by name.

Two datasets whose label 0 means "cat" in one and "ant" in the other cannot share a batch as
they are. `classes="union"` gives the loader the sorted union of their class names;
`classes=[...]` gives it a list of your own (a model's head, say), which must name every class
of every dataset. Either is a pure relabelling: each dataset's label i becomes the place of its
class i in the loader's list, through a small int array per dataset, applied per batch to the
labels a worker (or the DALI producer) looks up in the datasets' memory-mapped label columns:
a gather and a lookup per batch, in the workers, and no per-worker copy of a column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

import numpy as np

from datapipe.errors import ArgumentError, DataError
from datapipe.format.concat import ConcatDataset, split_ids
from datapipe.format.dataset import Dataset
from datapipe.format.manifest import Manifest
from datapipe.format.shard_reader import verify_hint

UNION = "union"
ClassesArg = str | Sequence[str] | None


def check_classes(classes: object) -> str | tuple[str, ...] | None:
    """`classes=` as given: None, "union", or a list of distinct class names."""
    if classes is None or (isinstance(classes, str) and classes == UNION):
        return classes  # type: ignore[return-value]
    wrong = ArgumentError(f"classes: give 'union' or a list of class names (non-empty "
                          f"strings), got {classes!r}")
    if isinstance(classes, str | bytes):
        raise wrong
    try:
        names = tuple(classes)  # type: ignore[arg-type]
    except TypeError:
        raise wrong from None
    if not names or not all(isinstance(n, str) and n for n in names):
        raise wrong
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ArgumentError(f"classes: {twice[0]!r} is given twice")
    return names


@dataclass(frozen=True)
class ClassLabels:
    """The loader's class list (None: the datasets have no class names), and for each dataset
    the loader's label of each of its labels (None: every dataset's labels stay as stored)."""

    classes: tuple[str, ...] | None
    maps: tuple[tuple[int, ...], ...] | None = None


def resolve_classes(manifests: Sequence[Manifest], locations: Sequence[object],
                    classes: str | tuple[str, ...] | None) -> ClassLabels:
    """The class list of a loader over these datasets (their shared classes when `classes` is
    None: the mixture checks have made sure they are one list)."""
    if classes is None:
        return ClassLabels(manifests[0].classes)
    for manifest, location in zip(manifests, locations, strict=True):
        if manifest.classes is None:
            raise ArgumentError(f"classes: {location} has no class names (its manifest lists "
                                "none), so its labels cannot be renumbered by name")
    names = tuple(sorted({c for m in manifests for c in m.classes or ()})) \
        if classes == UNION else classes
    place = {name: i for i, name in enumerate(names)}
    maps = []
    for manifest, location in zip(manifests, locations, strict=True):
        missing = [c for c in manifest.classes or () if c not in place]
        if missing:
            raise ArgumentError(f"classes: {location} has class {missing[0]!r}, which the list "
                                f"given lacks ({len(missing)} of its classes are not in it); "
                                "add them, or pass classes='union'")
        maps.append(tuple(place[c] for c in manifest.classes or ()))
    unchanged = all(m == tuple(range(len(m))) for m in maps)
    return ClassLabels(names, None if unchanged else tuple(maps))


class BatchLabels:
    """A batch's labels (int64) by sample id: looked up in the datasets' memory-mapped label
    columns and, with `maps`, renumbered per batch through each sample's dataset's table.
    Nothing the size of a column is made; a worker pays a gather and a lookup per batch."""

    def __init__(self, dataset: Dataset | ConcatDataset,
                 maps: tuple[tuple[int, ...], ...] | None) -> None:
        self.column = dataset.scalar_map("label")
        self.maps = maps
        if maps is None:
            return
        sources = dataset.sources if isinstance(dataset, ConcatDataset) else [dataset]
        self.offsets = dataset.offsets if isinstance(dataset, ConcatDataset) else \
            np.array([0, len(dataset)], dtype=np.int64)
        self.sizes = np.array([len(table) for table in maps], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        self.tables = np.array([label for table in maps for label in table], dtype=np.int64)
        self.names = [str(source.directory) for source in sources]
        for s, source in enumerate(sources):  # at start, from the columns' summaries
            low, high = source.scalar_range("label")
            if low is not None and (low < 0 or high >= self.sizes[s]):
                self._refuse(s, low if low < 0 else high)

    def __getitem__(self, ids: np.ndarray) -> np.ndarray:
        labels = np.asarray(self.column[ids]).astype(np.int64)
        if self.maps is None:
            return labels
        source = split_ids(np.asarray(ids, dtype=np.int64), self.offsets)[0]
        bad = (labels < 0) | (labels >= self.sizes[source])
        if bad.any():
            first = int(np.argmax(bad))
            self._refuse(int(source[first]), int(labels[first]))
        return self.tables[self.starts[source] + labels]

    def _refuse(self, source: int, label: int) -> NoReturn:
        raise DataError(f"{self.names[source]}: label {label} is not one of its manifest's "
                        f"{self.sizes[source]} classes {verify_hint(self.names[source])}")
