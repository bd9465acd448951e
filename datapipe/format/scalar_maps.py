"""A dataset's scalar columns (labels, image sizes, lengths) as memory maps shared by the node.

A loader's workers look up each sample's label and size per batch. Read from the shards into
every worker, those columns were private memory that grew with the corpus (~35 bytes a sample
a worker) and opened every shard before the first batch. They are written once per node
instead, one `.npy` per column in the column's own dtype, into the dataset's side directory
(beside its shards; a remote dataset's in the node's cache), and memory-mapped: their pages are
the page cache's, shared by every worker and rank on the node (as text/index.py keeps document
lengths):

    SIDE/.datapipe-scalars-<manifest16>-<place>-<digest16>.npy   the manifest's column <place>
    SIDE/.datapipe-scalars-<manifest16>-<place>-<digest16>.json  {column, count, low, high,
                                                                  checked}
    SIDE/.datapipe-scalars-<manifest16>.lock                     flock of the process building

A name carries the manifest's hash (a reconverted dataset gets new files) and a hash of the
column's values. The summary holds the smallest and largest value (start-up checks need no pass
over a column) and the file's size and mtime when its values last matched its name: a file
changed since is hashed again, and removed and rebuilt if it no longer matches; verify="open"
hashes it at every start. The first process that needs a column builds every scalar column in
one pass over the shards (their values get a shard's checks as they are read), streamed into
temporary files and renamed, under the lock: the node's other processes wait, then map them.
All of it is best effort: where the side directory cannot be written, a process reads the
columns into private arrays, as before.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from datapipe.format.cache import exclusive_lock
from datapipe.format.hashing import StreamHash, hash_bytes
from datapipe.format.manifest import Manifest
from datapipe.format.schema import Column
from datapipe.format.stamped_files import (
    file_stamp,
    load_intact,
    summary_path,
    write_atomically,
)

PREFIX = ".datapipe-scalars-"
# Every shard's scalar columns, in shard order: (its first sample, {column: values}).
Parts = Iterator[tuple[int, dict[str, np.ndarray]]]
Mapped = tuple[np.ndarray, "ColumnSummary"]


@dataclass(frozen=True)
class ColumnSummary:
    column: str
    count: int
    low: Any = None   # the smallest value (None: no samples)
    high: Any = None  # the largest
    checked: tuple[int, int] | None = None  # the file's (size, mtime_ns) when it matched

    def to_json(self) -> str:
        return json.dumps({"column": self.column, "count": self.count, "low": self.low,
                           "high": self.high, "checked": self.checked})

    @classmethod
    def from_json(cls, text: str) -> ColumnSummary:
        fields = json.loads(text)
        checked = fields.pop("checked", None)
        return cls(**fields, checked=tuple(checked) if checked else None)


class ScalarMaps:
    """The scalar columns of one dataset, mapped. `read(names)` yields every shard's values of
    those columns, checked, for when they must be built; `always_hash`: verify="open"."""

    def __init__(self, side_directory: Path, manifest: Manifest, manifest_digest: str,
                 read: Callable[[list[str]], Parts], always_hash: bool = False) -> None:
        self.directory = side_directory
        self.manifest = manifest
        self.prefix = f"{PREFIX}{manifest_digest.split(':')[1][:16]}-"
        self.count = manifest.num_samples
        self._read = read
        self._always_hash = always_hash
        self._columns: dict[str, Mapped] = {}

    def column(self, name: str) -> np.ndarray:
        """Every sample's value (read-only; memory-mapped where the index could be written)."""
        return self._mapped(name)[0]

    def summary(self, name: str) -> ColumnSummary:
        return self._mapped(name)[1]

    def _mapped(self, name: str) -> Mapped:
        if name not in self._columns:
            self._columns.update(self._load_or_build())
        return self._columns[name]

    def _load_or_build(self) -> dict[str, Mapped]:
        names = [c.name for c in self.manifest.columns if c.is_scalar]
        found = self._load_all(names)
        if len(found) == len(names):
            return found
        with contextlib.ExitStack() as held:
            with contextlib.suppress(OSError):  # a read-only directory: build unlocked
                held.enter_context(exclusive_lock(self.directory / f"{self.prefix[:-1]}.lock"))
            found = self._load_all(names)  # another process may have built them meanwhile
            missing = [name for name in names if name not in found]
            if missing:
                found.update(self._build(missing))
        return found

    def _load_all(self, names: list[str]) -> dict[str, Mapped]:
        places = {self._place(name): name for name in names}
        found: dict[str, Mapped] = {}
        with contextlib.suppress(OSError):  # no directory yet: nothing built
            for path in sorted(self.directory.glob(f"{self.prefix}*.npy")):
                name = places.get(path.name[len(self.prefix):].split("-")[0])
                if name is not None and name not in found:
                    mapped = self._load_intact(path, self.manifest.column(name))
                    if mapped is not None:
                        found[name] = mapped
        return found

    def _place(self, name: str) -> str:
        return str(self.manifest.column_names.index(name))

    def _load_intact(self, path: Path, column: Column) -> Mapped | None:
        """The column in the file, if it holds what its name and summary say (else the file
        is removed)."""
        return load_intact(path, ColumnSummary.from_json,
                           lambda values, summary: values.ndim == 1
                           and values.dtype == column.numpy_dtype
                           and summary.column == column.name
                           and len(values) == summary.count == self.count,
                           _digest, self._always_hash)

    def _build(self, names: list[str]) -> dict[str, Mapped]:
        """The columns read from the shards, saved and mapped; in private arrays where they
        cannot be saved."""
        columns = [self.manifest.column(name) for name in names]
        saved = self._save(columns)
        mapped = {c.name: self._load_intact(path, c)
                  for c, path in zip(columns, saved or (), strict=False)}
        if saved is None or any(m is None for m in mapped.values()):
            return self._in_memory(names)
        return mapped  # type: ignore[return-value]  # none is None: checked above

    def _save(self, columns: list[Column]) -> list[Path] | None:
        """The columns streamed from the shards into their files (None: they could not be
        written, a read-only directory or a full disk)."""
        writers: list[_ColumnWriter] = []
        try:
            for column in columns:
                writers.append(_ColumnWriter(self._tmp_path(column), column, self.count))
            for _, part in self._read([c.name for c in columns]):
                for writer in writers:
                    writer.append(part[writer.column.name])
            return [writer.finish(self.directory, self.prefix, self._place(writer.column.name))
                    for writer in writers]
        except OSError:
            return None
        finally:
            for writer in writers:
                writer.discard()

    def _tmp_path(self, column: Column) -> Path:
        return self.directory / f"{self.prefix}{self._place(column.name)}.{os.getpid()}.tmp"

    def _in_memory(self, names: list[str]) -> dict[str, Mapped]:
        columns = {name: np.empty(self.count, self.manifest.column(name).numpy_dtype)
                   for name in names}
        for start, part in self._read(names):
            for name, values in part.items():
                columns[name][start:start + len(values)] = values
        for values in columns.values():
            values.flags.writeable = False  # as the maps are
        return {name: (values, _summary_of(name, values)) for name, values in columns.items()}


class _ColumnWriter:
    """One column streamed shard by shard into a temporary .npy, its hash and range taken on
    the way (ordinary writes: a full disk is an OSError, where a written map would SIGBUS)."""

    def __init__(self, tmp: Path, column: Column, count: int) -> None:
        self.tmp, self.column, self.count = tmp, column, count
        self.dtype = column.numpy_dtype
        self.file = open(tmp, "wb")  # noqa: SIM115 - closed by finish() or discard()
        try:
            np.lib.format.write_array_header_1_0(self.file, {
                "descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
                "shape": (count,)})
        except OSError:
            self.discard()
            raise
        self.hash = StreamHash()
        self.written = 0
        self.low: Any = None
        self.high: Any = None

    def append(self, values: np.ndarray) -> None:
        data = np.ascontiguousarray(values, dtype=self.dtype)
        if not len(data):
            return
        self.file.write(data.data)
        self.hash.update(data.data.cast("B"))
        self.written += len(data)
        low, high = data.min().item(), data.max().item()
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)

    def finish(self, directory: Path, prefix: str, place: str) -> Path:
        """The file under its final name (its summary first, stamped with the file it
        describes: os.replace keeps the stamp, so a column is never there without it)."""
        if self.written != self.count:
            raise OSError(f"{self.column.name}: {self.written} values read, {self.count} "
                          "expected")
        self.file.close()
        digest = self.hash.hexdigest().split(":")[1][:16]
        path = directory / f"{prefix}{place}-{digest}.npy"
        summary = ColumnSummary(self.column.name, self.count, self.low, self.high,
                                file_stamp(self.tmp))
        if not write_atomically(summary_path(path), summary.to_json().encode()):
            raise OSError(f"{summary_path(path)}: cannot be written")
        os.replace(self.tmp, path)
        return path

    def discard(self) -> None:
        self.file.close()
        with contextlib.suppress(OSError):  # renamed already, or never made
            self.tmp.unlink()


def _summary_of(name: str, values: np.ndarray) -> ColumnSummary:
    if not len(values):
        return ColumnSummary(name, 0)
    return ColumnSummary(name, len(values), values.min().item(), values.max().item())




def _digest(values: np.ndarray) -> str:
    return hash_bytes(memoryview(np.ascontiguousarray(values)).cast("B")).split(":")[1][:16]
