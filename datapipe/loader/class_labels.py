"""`classes=` of dp.Loader: one class list over image datasets whose classes differ, each
dataset's labels renumbered to it by name.

Two datasets whose label 0 means "cat" in one and "ant" in the other cannot share a batch as
they are. `classes="union"` gives the loader the sorted union of their class names;
`classes=[...]` gives it a list of your own (a model's head, say), which must name every class
of every dataset. Either is a pure relabelling: each dataset's label i becomes the place of its
class i in the loader's list, through a small int array per dataset, applied once to the label
column a worker (or the DALI producer) loads when it starts; a batch costs nothing more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from datapipe.errors import ArgumentError, DataError
from datapipe.format.concat import ConcatDataset
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


def relabelled(dataset: Dataset | ConcatDataset,
               maps: tuple[tuple[int, ...], ...] | None) -> np.ndarray:
    """The dataset's labels (int64, in combined order for several), each source's renumbered
    by its map."""
    labels = dataset.scalar("label").astype(np.int64)
    if maps is None:
        return labels
    sources = dataset.sources if isinstance(dataset, ConcatDataset) else [dataset]
    offsets = dataset.offsets if isinstance(dataset, ConcatDataset) else (0, len(labels))
    for s, (source, table) in enumerate(zip(sources, maps, strict=True)):
        own = labels[offsets[s]:offsets[s + 1]]
        if len(own) and (own.min() < 0 or own.max() >= len(table)):
            bad = int(own[(own < 0) | (own >= len(table))][0])
            raise DataError(f"{source.directory}: label {bad} is not one of its manifest's "
                            f"{len(table)} classes {verify_hint(str(source.directory))}")
        own[:] = np.asarray(table, dtype=np.int64)[own]
    return labels
