"""Several datasets read as one, as torch's ConcatDataset: the samples of source 0, then those
of source 1, and so on. A mixture's planners give *combined* ids (source s's sample i is
`offsets[s] + i`), and a loader's workers read them through this as through one `Dataset`:
shards are numbered on across the sources, so what a worker caches per shard number (token
views, open readers) needs no change.

The sources must hold the same schema (a loader checks that when it is made, naming what
differs); `manifest` is the first source's, for the columns and settings they share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from datapipe.format.dataset import Dataset
from datapipe.format.manifest import Manifest
from datapipe.format.shard_reader import ShardReader
from datapipe.format.sources import RemoteLocation

Locations = tuple[Path | RemoteLocation, ...]
# A batch's key for each sample's source (its dataset's place in the list), beside `index`.
SOURCE_FIELD = "source"


class ConcatDataset:
    """Datasets at `locations`, in order, as one: combined sample ids and shard numbers."""

    def __init__(self, locations: Sequence[str | Path | RemoteLocation],
                 verify: str = "cheap") -> None:
        self.sources = [Dataset(location, verify=verify) for location in locations]
        sizes = [len(ds) for ds in self.sources]
        self.offsets = np.zeros(len(sizes) + 1, dtype=np.int64)  # source s's first sample
        np.cumsum(sizes, out=self.offsets[1:])
        shard_counts = [ds.num_shards for ds in self.sources]
        self.shard_offsets = np.zeros(len(shard_counts) + 1, dtype=np.int64)
        np.cumsum(shard_counts, out=self.shard_offsets[1:])
        self.shard_starts = np.concatenate(
            [ds.shard_starts[:-1] + self.offsets[s] for s, ds in enumerate(self.sources)]
            + [self.offsets[-1:]])
        # Combined shard number -> (its dataset, its number there): a list, as a worker looks
        # one up per sample.
        self._shards = [(ds, k) for ds in self.sources for k in range(ds.num_shards)]
        # Combined shard number -> its source: a batch's sources from the shards it located.
        self.shard_source = np.repeat(np.arange(len(sizes), dtype=np.int64), shard_counts)
        self.manifest: Manifest = self.sources[0].manifest
        self.directory = ", ".join(str(ds.directory) for ds in self.sources)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def num_shards(self) -> int:
        return int(self.shard_offsets[-1])

    def split(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source, index within the source) of combined ids."""
        return split_ids(ids, self.offsets)

    def shard(self, k: int) -> ShardReader:
        dataset, local = self._shards[k]
        return dataset.shard(local)

    def on_close(self, callback: Callable[[int], None]) -> None:
        """`callback(k)` with the combined shard number when a source closes one of its own."""
        for s, dataset in enumerate(self.sources):
            first = int(self.shard_offsets[s])
            dataset.on_close(lambda k, first=first: callback(first + k))

    def locate_many(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        shards = np.searchsorted(self.shard_starts, indices, side="right") - 1
        return shards, indices - self.shard_starts[shards]

    def scalar(self, name: str) -> np.ndarray:
        """A scalar column over every source, in combined order."""
        return np.concatenate([ds.scalar(name) for ds in self.sources])

    def scalar_map(self, name: str) -> CombinedColumn:
        """A scalar column over every source by combined id: each source's own map
        (Dataset.scalar_map), nothing the size of the whole made."""
        return CombinedColumn([ds.scalar_map(name) for ds in self.sources], self.offsets)

    def cells(self, name: str, indices: np.ndarray) -> np.ndarray | list[Any]:
        """Column `name` of the combined ids `indices` (as Dataset.cells), source by source."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        source, local = self.split(indices)
        parts = {s: self.sources[s].cells(name, local[source == s])
                 for s in np.unique(source).tolist()}
        if not parts:
            return self.sources[0].cells(name, indices)
        if all(isinstance(p, np.ndarray) for p in parts.values()):
            first = next(iter(parts.values()))
            out = np.empty((len(indices), *first.shape[1:]), dtype=first.dtype)
            for s, values in parts.items():
                out[source == s] = values
            return out
        cells: list[Any] = [None] * len(indices)
        for s, values in parts.items():
            for at, value in zip(np.flatnonzero(source == s).tolist(), values, strict=True):
                cells[at] = value
        return cells

    def close(self) -> None:
        for dataset in self.sources:
            dataset.close()

    def __enter__(self) -> ConcatDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CombinedColumn:
    """One scalar column of several sources, indexed by combined id as an array is: `[ids]`
    gathers each source's values from its own (memory-mapped) column, `[i]` is one value."""

    def __init__(self, parts: Sequence[np.ndarray], offsets: np.ndarray) -> None:
        self.parts = list(parts)
        self.offsets = offsets
        self.dtype = np.result_type(*self.parts)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, ids: int | np.integer | np.ndarray) -> Any:
        if isinstance(ids, int | np.integer):
            if not 0 <= ids < len(self):
                raise IndexError(f"id {ids} out of range ({len(self)} samples)")
            s = int(np.searchsorted(self.offsets, ids, side="right")) - 1
            return self.parts[s][ids - self.offsets[s]]
        source, local = split_ids(np.asarray(ids, dtype=np.int64), self.offsets)
        values = np.empty(len(local), dtype=self.dtype)
        for s in np.unique(source).tolist():
            at = source == s
            values[at] = self.parts[s][local[at]]
        return values


def split_ids(ids: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(source, index within the source) of combined ids (`offsets`: each source's first)."""
    source = np.searchsorted(offsets, ids, side="right") - 1
    return source, ids - offsets[source]


def open_dataset(where: str | Path | RemoteLocation | Locations,
                 verify: str = "cheap") -> Dataset | ConcatDataset:
    """One dataset, or several (a tuple of locations) read as one."""
    if isinstance(where, tuple):
        return ConcatDataset(where, verify=verify)
    return Dataset(where, verify=verify)


def batch_ids(dataset: Dataset | ConcatDataset, indices: np.ndarray,
              shards: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """A batch's `index`: the samples' ids; for several datasets read as one (combined ids),
    the ids within their own datasets, with `source` beside them (int64, as a batch holds
    it), from the shards `locate_many` found for them where the caller has them. Made in the
    workers, so that the training thread only wraps them."""
    if isinstance(dataset, Dataset):
        return {"index": indices}
    if shards is None:
        shards = dataset.locate_many(indices)[0]
    source = dataset.shard_source[shards]
    return {"index": indices - dataset.offsets[source], SOURCE_FIELD: source}


def sample_where(dataset: Dataset | ConcatDataset, shard: ShardReader, row: int,
                 index: int) -> str:
    """A sample, as an error names it: a mixture's by its shard's whole path (its sources'
    shards may share names) and its id within its own dataset."""
    if isinstance(dataset, ConcatDataset):
        local = int(dataset.split(np.array([index]))[1][0])
        return f"{shard.where} row {row} (sample {local})"
    return f"{shard.path.name} row {row} (sample {index})"
