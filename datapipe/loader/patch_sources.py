"""What PatchLoader reads of its dataset, or of each dataset of a mixture, before it plans:
each checked, each image's stored size (memory-mapped: no decode, no copy), the extra
columns, the class list; and the patch counts the preset's resize rule gives those sizes."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.errors import DataError
from datapipe.format.concat import CombinedColumn, ConcatDataset, open_dataset
from datapipe.format.dataset import Dataset
from datapipe.image.patch_geometry import GridGeometry
from datapipe.loader.base import refuse_empty
from datapipe.loader.class_labels import ClassLabels, resolve_classes
from datapipe.loader.extra_columns import choose as extra_column_names
from datapipe.loader.patch_epochs import PatchCounts, check_fits
from datapipe.loader.patch_presets import PatchSettings
from datapipe.loader.patch_totals import patch_total
from datapipe.loader.progress_state import manifest_fingerprint

SIZE_COLUMNS = ("height", "width")
STANDARD_COLUMNS = {"image", "label", *SIZE_COLUMNS}


@dataclass(frozen=True)
class PatchSources:
    """The images of one dataset, or of each source of a mixture, in order."""

    names: tuple[str, ...]  # each source as messages name it
    heights: tuple[np.ndarray, ...]  # per source, per image
    widths: tuple[np.ndarray, ...]
    fingerprint: Any  # the manifest's (a mixture's: by source name)
    extras: tuple[str, ...]  # the extra columns a batch carries
    labels: ClassLabels
    totals_of: tuple[Callable[[PatchCounts], int], ...]  # per source: its patches, cached

    @property
    def num_images(self) -> int:
        return sum(len(h) for h in self.heights)

    def counts(self, geometry: Any) -> list[PatchCounts]:
        """Each source's patch counts (looked up per window, nothing computed ahead)."""
        return [PatchCounts(h, w, geometry)
                for h, w in zip(self.heights, self.widths, strict=True)]

    def combined(self, geometry: Any) -> PatchCounts:
        """Every image's patch count by combined id (a mixture's sources one after another)."""
        if len(self.heights) == 1:
            return PatchCounts(self.heights[0], self.widths[0], geometry)
        offsets = np.concatenate([[0], np.cumsum([len(h) for h in self.heights])])
        offsets = offsets.astype(np.int64)
        return PatchCounts(CombinedColumn(self.heights, offsets),
                           CombinedColumn(self.widths, offsets), geometry)

    def totals(self, geometry: Any) -> list[int]:
        """Each source's patches summed, from the node's file where one was kept."""
        return [total(counts) for total, counts in
                zip(self.totals_of, self.counts(geometry), strict=True)]

    def check_fits(self, geometry: Any, max_patches: int) -> None:
        """Every image of every source fits one batch (else refused, naming its source)."""
        for name, counts in zip(self.names, self.counts(geometry), strict=True):
            check_fits(counts, max_patches, name)


def read_sources(path: Any, names: tuple[str, ...], mixing: Any, verify: str,
                 extra_columns: tuple[str, ...] | None,
                 classes: str | tuple[str, ...] | None) -> PatchSources:
    """The dataset (or a mixture's datasets: image datasets of one encoding, whose classes
    agree or are renumbered by `classes`), checked, with their stored sizes."""
    with open_dataset(path, verify=verify) as ds:
        parts = ds.sources if isinstance(ds, ConcatDataset) else [ds]
        for part, name in zip(parts, names, strict=True):
            check_patch_dataset(part, name)
        if mixing:
            mixing.check(parts, "images", relabelled=classes is not None)
        for part in parts:
            if verify == "open":
                part.check_hashes()  # here, before workers fork: each shard hashed once
        labels = resolve_classes([p.manifest for p in parts], names, classes)
        if mixing:
            extras = mixing.extra_columns(parts, extra_columns, STANDARD_COLUMNS)
            fingerprint = mixing.fingerprints(parts)
        else:
            extras = extra_column_names(ds.manifest, extra_columns, STANDARD_COLUMNS)
            fingerprint = manifest_fingerprint(ds.manifest)
        totals = tuple(functools.partial(patch_total, p.side_directory, p.manifest_digest())
                       for p in parts)
        return PatchSources(names, tuple(p.scalar_map("height") for p in parts),
                            tuple(p.scalar_map("width") for p in parts), fingerprint, extras,
                            labels, totals)


def check_patch_dataset(ds: Dataset, name: str) -> None:
    """An image dataset with each image's stored size, which plans its patches undecoded."""
    manifest = ds.manifest
    if manifest.kind != "images":
        raise DataError(f"{name}: a {manifest.kind} dataset; PatchLoader reads images")
    missing = [c for c in SIZE_COLUMNS if c not in manifest.column_names]
    if missing:
        raise DataError(f"{name}: no stored image sizes (no column {missing[0]!r}); "
                        "PatchLoader plans each image's patches from them without decoding: "
                        "convert it again with `datapipe convert images`")
    refuse_empty(ds)


def fitted(settings: PatchSettings, oversize: str, max_patches: int) -> PatchSettings:
    """The settings with max_pixels lowered to what the budget holds (oversize="downscale"
    and a grid geometry that can exceed it), else as given."""
    geometry = settings.patches.geometry
    if oversize != "downscale" or not isinstance(geometry, GridGeometry) or \
            geometry.max_patches_per_image <= max_patches:
        return settings
    most = max_patches * geometry.patch_size ** 2
    geometry = dataclasses.replace(geometry, max_pixels=most,
                                   min_pixels=min(geometry.min_pixels, most))
    return dataclasses.replace(settings, patches=dataclasses.replace(settings.patches,
                                                                     geometry=geometry))
