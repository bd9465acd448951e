"""A dataset directory opened for reading: manifest plus lazily opened shard readers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from datapipe.errors import DataError
from datapipe.format.integrity import check_shard_hash, check_shard_values, check_verify_mode
from datapipe.format.manifest import Manifest
from datapipe.format.shard_reader import ShardReader, open_shard


class Dataset:
    """Random access by global sample index over all shards of a dataset.

    Each shard is checked as it is opened (see integrity.py): with verify="cheap", its
    structure and scalar columns; with verify="open", also its content hash.
    """

    def __init__(self, directory: str | Path, verify: str = "cheap") -> None:
        self.directory = Path(directory)
        self.verify = check_verify_mode(verify)
        self.manifest = Manifest.load(self.directory)
        rows = [s.rows for s in self.manifest.shards]
        # shard_starts[k] is the global index of shard k's first sample.
        self.shard_starts = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(rows, out=self.shard_starts[1:])
        self._readers: dict[int, ShardReader] = {}

    def __len__(self) -> int:
        return int(self.shard_starts[-1])

    @property
    def num_shards(self) -> int:
        return len(self.manifest.shards)

    def shard(self, k: int) -> ShardReader:
        reader = self._readers.get(k)
        if reader is None:
            reader = self._readers[k] = self._open(k)
        return reader

    def _open(self, k: int) -> ShardReader:
        info = self.manifest.shards[k]
        path = self.directory / info.name
        if self.verify == "open":
            check_shard_hash(path, info)
        reader = open_shard(path, self.manifest.shard_format, self.manifest.columns,
                            first_sample=int(self.shard_starts[k]))
        try:
            if reader.num_rows != info.rows:
                raise DataError(f"{reader.path}: holds {reader.num_rows} rows, manifest says "
                                f"{info.rows}; run `datapipe verify {self.directory}`")
            check_shard_values(reader, self.manifest)
        except DataError:
            reader.close()
            raise
        return reader

    def check_hashes(self) -> None:
        """Hash every shard against the manifest now, rather than as each is first opened
        (once per process tree: processes forked afterwards do not hash them again)."""
        for info in self.manifest.shards:
            check_shard_hash(self.directory / info.name, info)

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
        k, row = self.locate(index)
        return self.shard(k).row(row)

    def scalar(self, name: str) -> np.ndarray:
        """A scalar column over the whole dataset (labels, lengths), read shard by shard."""
        self.manifest.column(name)
        if not self.num_shards:
            return np.empty(0, dtype=self.manifest.column(name).numpy_dtype)
        return np.concatenate([self.shard(k).scalar(name) for k in range(self.num_shards)])

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
