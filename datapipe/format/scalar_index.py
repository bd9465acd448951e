"""The scalar columns (labels, sizes, lengths) of a remote dataset, without its payloads.

Loaders need every sample's label, size or length before the first batch; downloading every
shard for that would fill the cache with a whole epoch before training starts. Both formats
keep scalars apart from payloads (Arrow buffers per column, the msgpack footer), so they are
read with range requests: tens of KB per shard, and kept once per node in the cache's index
folder as memory-mapped columns (scalar_maps.py), so workers and later runs map small files.
The values get the same checks as a shard's scalars when it is opened.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from datapipe.errors import DataError
from datapipe.format.integrity import check_shard_values
from datapipe.format.manifest import Manifest, ShardInfo
from datapipe.format.schema import Column
from datapipe.format.shard_formats import get_format
from datapipe.format.shard_reader import ShardReader

_PARALLEL_READS = 16  # range requests are latency-bound: overlap them


def remote_scalars(source: Any, manifest: Manifest,
                   names: list[str]) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """Each shard's columns `names` (`source` is a RemoteShards), in shard order, checked:
    what scalar_maps.py writes once per node."""
    starts = np.concatenate([[0], np.cumsum([s.rows for s in manifest.shards])])
    with ThreadPoolExecutor(_PARALLEL_READS) as pool:
        parts = pool.map(lambda k: _shard_scalars(source, manifest, k, int(starts[k]), names),
                         range(len(manifest.shards)))
        for k, part in enumerate(parts):
            yield int(starts[k]), part


def _shard_scalars(source: Any, manifest: Manifest, k: int, first_sample: int,
                   names: list[str]) -> dict[str, np.ndarray]:
    info: ShardInfo = manifest.shards[k]
    where = source.where(info.name)
    dataset = str(source.location)
    file = source.store.open_random_access(info.name)
    try:
        size = file.size()
        if size != info.bytes:
            raise DataError(f"{where}: size {size} bytes, manifest says {info.bytes}; the "
                            f"shard is corrupt or was replaced (run `datapipe verify {dataset}`)")
        read_scalars = get_format(manifest.shard_format).codec.read_scalars
        try:
            columns = read_scalars(file, size, manifest.columns, names)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataError(f"{where}: damaged shard index ({exc}) (a corrupt shard? run "
                            f"`datapipe verify {dataset}`)") from None
    finally:
        file.close()
    for name, values in columns.items():
        if len(values) != info.rows:
            raise DataError(f"{where}: column {name!r} holds {len(values)} rows, manifest says "
                            f"{info.rows} (run `datapipe verify {dataset}`)")
    check_shard_values(_Scalars(where, dataset, manifest.columns, columns, first_sample),
                       manifest)
    return columns


class _Scalars(ShardReader):
    """A shard's scalar columns read apart from it: enough for the checks a shard's scalars
    get when it is opened."""

    def __init__(self, where: str, dataset: str, columns: tuple[Column, ...],
                 scalars: dict[str, np.ndarray], first_sample: int) -> None:
        super().__init__(Path(where.rsplit("/", 1)[-1]), columns, first_sample, where, dataset)
        self._scalars = scalars
        self.num_rows = len(next(iter(scalars.values()))) if scalars else 0

    def scalar(self, name: str) -> np.ndarray:
        return self._scalars[name]

    def payload(self, name: str, row: int) -> np.ndarray:
        raise DataError(f"{self.where}: payloads are not read here")

    def value(self, name: str, row: int) -> Any:
        raise DataError(f"{self.where}: values are not read here")
