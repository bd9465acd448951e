"""A dataset opened for reading: manifest plus lazily opened shard readers.

The dataset is a local directory or a URL (s3://, gs://, ...): see sources.py for how remote
shards reach a local path through the node's cache.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from datapipe.errors import DataError
from datapipe.format.check_marks import CheckMarks
from datapipe.format.integrity import check_verify_mode, open_checked
from datapipe.format.scalar_index import remote_scalars
from datapipe.format.scalar_maps import ScalarMaps
from datapipe.format.shard_reader import ShardReader
from datapipe.format.sources import RemoteLocation, ShardFile, open_source


class Dataset:
    """Random access by global sample index over all shards of a dataset.

    Each shard is checked as it is opened (see integrity.py): with verify="cheap", its
    structure and scalar columns; with verify="open", also its content hash. The passes over a
    shard's rows are made once per unchanged file on the node, which then holds a marker
    (check_marks.py). A remote shard that fails a check is fetched again once (its cached copy
    may be what is damaged).
    `directory` is a path, a URL (with the default cache settings) or a RemoteLocation.
    """

    def __init__(self, directory: str | Path | RemoteLocation, verify: str = "cheap") -> None:
        self.verify = check_verify_mode(verify)
        self.source = open_source(directory)
        self.directory = self.source.location  # a Path, or a RemoteLocation printing its URL
        self.manifest = self.source.load_manifest()
        rows = [s.rows for s in self.manifest.shards]
        # shard_starts[k] is the global index of shard k's first sample.
        self.shard_starts = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(rows, out=self.shard_starts[1:])
        self._readers: dict[int, ShardReader] = {}
        self._files: dict[int, ShardFile] = {}
        self._on_close: list[Callable[[int], None]] = []
        self._maps: ScalarMaps | None = None
        self._marks = CheckMarks(self.side_directory, self.manifest_digest())
        # A remote dataset keeps few shards open (in use, so not evictable): the cache may be
        # smaller than the dataset.
        self._max_open = self.source.max_open(self.manifest) if self.source.remote else 0

    @property
    def side_directory(self) -> Path:
        """A local folder for files derived from this dataset (the length index, the markers
        of checked shards)."""
        return self.source.side_directory

    def manifest_digest(self) -> str:
        return self.source.manifest_digest()

    def on_close(self, callback: Callable[[int], None]) -> None:
        """Call `callback(k)` whenever shard k's reader is closed (views of it go stale)."""
        self._on_close.append(callback)

    def __len__(self) -> int:
        return int(self.shard_starts[-1])

    @property
    def num_shards(self) -> int:
        return len(self.manifest.shards)

    def shard(self, k: int) -> ShardReader:
        reader = self._readers.get(k)
        if reader is None:
            if self._max_open and len(self._readers) >= self._max_open:
                self._close_shard(next(iter(self._readers)))  # the least recently used
            reader = self._open(k)
            self._readers[k] = reader
        elif self._max_open:
            self._readers[k] = self._readers.pop(k)  # most recently used last
        return reader

    def _open(self, k: int) -> ShardReader:
        for attempt in range(2 if self.source.remote else 1):
            file = self.source.open(self.manifest.shards[k], self.verify, fresh=attempt > 0)
            try:
                reader = self._read(k, file.path)
            except DataError:
                file.release()
                if attempt or not self.source.remote:
                    raise
                continue  # fetch it again: the cached copy may be what is damaged
            self._files[k] = file
            return reader
        raise AssertionError("unreachable")

    def _read(self, k: int, path: Path) -> ShardReader:
        return open_checked(path, self.manifest, k, int(self.shard_starts[k]),
                            self.source.where(self.manifest.shards[k].name), str(self.directory),
                            self._marks)

    def _close_shard(self, k: int) -> None:
        reader = self._readers.pop(k)
        reader.close()
        file = self._files.pop(k, None)
        if file is not None:
            file.release()
        for callback in self._on_close:
            callback(k)

    def check_hashes(self) -> None:
        """Hash every shard against the manifest now, rather than as each is first opened
        (once per process tree: processes forked afterwards do not hash them again). A remote
        dataset is downloaded into the cache for it."""
        for info in self.manifest.shards:
            self.source.open(info, "open").release()

    def locate(self, index: int) -> tuple[int, int]:
        """Global sample index -> (shard, row in shard)."""
        if not 0 <= index < len(self):
            raise DataError(f"{self.directory}: sample {index} out of range ({len(self)} samples)")
        k = int(np.searchsorted(self.shard_starts, index, side="right")) - 1
        return k, index - int(self.shard_starts[k])

    def locate_many(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        shards = np.searchsorted(self.shard_starts, indices, side="right") - 1
        return shards, indices - self.shard_starts[shards]

    def __getitem__(self, index: int) -> dict[str, Any]:
        """Sample `index` as {column: value}: a payload (bytes, tokens, an array) as a numpy
        array over the shard's memory map, in its shape, any other column as a Python value."""
        k, row = self.locate(index)
        return self.shard(k).row(row)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Every sample, in order (as `self[i]` gives them)."""
        for k in range(self.num_shards):
            reader = self.shard(k)
            for row in range(reader.num_rows):
                yield reader.row(row)

    def cells(self, name: str, indices: Sequence[int] | np.ndarray) -> np.ndarray | list[Any]:
        """Column `name` of the samples `indices`: an array for a scalar column and a
        fixed-shape array (stacked: N x shape), a list for the others (str, bytes, arrays of
        any length)."""
        column = self.manifest.column(name)
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(indices) and (indices.min() < 0 or indices.max() >= len(self)):
            bad = indices[(indices < 0) | (indices >= len(self))][0]
            self.locate(int(bad))  # the error that names it
        shards, rows = self.locate_many(indices)
        if column.is_payload:
            cells = [self.shard(k).cell(name, row)
                     for k, row in zip(shards.tolist(), rows.tolist(), strict=True)]
        else:  # strings and the like: each shard's rows read in one go
            cells = [None] * len(indices)
            for k in np.unique(shards).tolist():
                at = np.flatnonzero(shards == k)
                for i, value in zip(at.tolist(), self.shard(k).values(name, rows[at].tolist()),
                                    strict=True):
                    cells[i] = value
        if column.type == "bytes":
            return [cell.tobytes() for cell in cells]
        if column.is_scalar:
            return np.asarray(cells, dtype=column.numpy_dtype)
        if column.shape is not None:
            return np.stack(cells) if cells else np.empty((0, *column.shape),
                                                          column.numpy_dtype)
        return cells

    def scalar(self, name: str) -> np.ndarray:
        """A scalar column over the whole dataset (labels, lengths): a private array read shard
        by shard; a remote dataset's is its scalar map (read apart from the payloads)."""
        self._scalar_column(name)
        if self.source.remote:
            return self.scalar_map(name)
        if not self.num_shards:
            return np.empty(0, dtype=self.manifest.column(name).numpy_dtype)
        return np.concatenate([self.shard(k).scalar(name) for k in range(self.num_shards)])

    def scalar_map(self, name: str) -> np.ndarray:
        """A scalar column over the whole dataset, read-only and memory-mapped from the node's
        index of them (scalar_maps.py): built once per node, its pages shared by every process
        that maps it, no shard opened to read it; a private array where the index cannot be
        written. Index it per batch (`values[indices]`)."""
        self._scalar_column(name)
        return self._scalar_maps().column(name)

    def scalar_range(self, name: str) -> tuple[Any, Any]:
        """(smallest, largest) value of a scalar column, from its map's summary ((None, None)
        for no samples)."""
        self._scalar_column(name)
        summary = self._scalar_maps().summary(name)
        return summary.low, summary.high

    def _scalar_column(self, name: str) -> None:
        column = self.manifest.column(name)
        if not column.is_scalar:
            raise DataError(f"{self.directory}: column {name!r} is {column.type}, not a scalar")

    def _scalar_maps(self) -> ScalarMaps:
        if self._maps is None:
            read = (functools.partial(remote_scalars, self.source, self.manifest)
                    if self.source.remote else self._shard_scalars)
            self._maps = ScalarMaps(self.side_directory, self.manifest, self.manifest_digest(),
                                    read, always_hash=self.verify == "open")
        return self._maps

    def _shard_scalars(self, names: list[str]) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """Each shard's columns `names`, checked as a shard is when it opens; a shard opened
        for them alone is closed again."""
        for k in range(self.num_shards):
            was_open = k in self._readers
            reader = self.shard(k)
            yield int(self.shard_starts[k]), {name: reader.scalar(name) for name in names}
            if not was_open:
                self._close_shard(k)

    def close(self) -> None:
        for k in list(self._readers):
            self._close_shard(k)

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
