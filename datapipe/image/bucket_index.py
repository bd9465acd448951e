"""A dataset's bucket index: every sample id sorted by its aspect-ratio bucket, beside the shards.

Built once per (manifest, bucket set) from the stored sizes (the memory-mapped scalar columns:
no image decoded, no shard opened) and memory-mapped by every rank and worker of the node, as
the scalar maps and the length index are (format/scalar_maps.py, text/index.py): nothing per
rank the size of the corpus. One file, the ids of bucket 0, then bucket 1, ... (each in id
order), and a JSON summary beside it with each bucket's count:

    SIDE/.datapipe-buckets-<manifest16>-<buckets16>-<content16>.npy
    SIDE/.datapipe-buckets-<manifest16>-<buckets16>-<content16>.json  {count, counts, far,
                                                                        worst, checked}

A file changed since its content last matched its name is hashed again (verify="open": every
time) and rebuilt if it no longer matches. The first process builds it under a lock while the
node's others wait; where the side directory cannot be written, each process keeps private
arrays instead.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datapipe.format.cache import exclusive_lock
from datapipe.format.dataset import Dataset
from datapipe.format.hashing import hash_bytes
from datapipe.format.stamped_files import (
    load_intact,
    save_quietly,
)
from datapipe.image.buckets import Buckets

PREFIX = ".datapipe-buckets-"
_CHUNK = 1 << 20  # images assigned at once: a chunk x buckets distance matrix stays small


@dataclass(frozen=True)
class BucketSummary:
    count: int
    counts: tuple[int, ...]  # images in each bucket
    far: int = 0  # images further than max_aspect_error from every bucket
    worst: float = 0.0  # the largest distance of an image to its bucket (log-ratio)
    checked: tuple[int, int] | None = None  # the file's (size, mtime_ns) when it matched

    def to_json(self) -> str:
        return json.dumps({"count": self.count, "counts": list(self.counts), "far": self.far,
                           "worst": self.worst, "checked": self.checked})

    @classmethod
    def from_json(cls, text: str) -> BucketSummary:
        fields = json.loads(text)
        checked = fields.pop("checked", None)
        return cls(fields["count"], tuple(fields["counts"]), fields["far"], fields["worst"],
                   tuple(checked) if checked else None)


@dataclass(frozen=True)
class BucketIndex:
    """Every id, bucket by bucket (`ids[offsets[k]:offsets[k + 1]]` are bucket k's)."""

    ids: np.ndarray
    summary: BucketSummary

    @property
    def offsets(self) -> tuple[int, ...]:
        return (0, *np.cumsum(self.summary.counts, dtype=np.int64).tolist())


def bucket_index(dataset: Dataset, buckets: Buckets) -> BucketIndex:
    """The dataset's index for `buckets`: mapped from its file, else built (and saved where the
    side directory can be written)."""
    directory = dataset.side_directory
    prefix = f"{PREFIX}{dataset.manifest_digest().split(':')[1][:16]}-{buckets.digest()}-"
    always_hash = dataset.verify == "open"
    found = _find(directory, prefix, len(dataset), len(buckets.sizes), always_hash)
    if found is not None:
        return found
    with contextlib.ExitStack() as held:
        with contextlib.suppress(OSError):  # a read-only directory: build unlocked
            held.enter_context(exclusive_lock(directory / f"{prefix[:-1]}.lock"))
        found = _find(directory, prefix, len(dataset), len(buckets.sizes), always_hash)
        if found is not None:  # another process built it meanwhile
            return found
        index = _build(dataset, buckets)
        path = directory / f"{prefix}{_content_digest(index.ids)}.npy"
        if save_quietly(path, index.ids, index.summary):
            saved = _load_intact(path, len(dataset), len(buckets.sizes), False)
            if saved is not None:
                return saved
        return index


def _build(dataset: Dataset, buckets: Buckets) -> BucketIndex:
    """Two passes over the stored sizes, a chunk at a time: count each bucket, then place each
    id at its bucket's next free slot (a counting sort: stable, nothing the size of the corpus
    but the index itself)."""
    heights, widths = dataset.scalar_map("height"), dataset.scalar_map("width")
    n, k = len(dataset), len(buckets.sizes)
    counts = np.zeros(k, dtype=np.int64)
    far, worst = 0, 0.0
    for lo in range(0, n, _CHUNK):
        chosen, distance = buckets.assign(heights[lo:lo + _CHUNK], widths[lo:lo + _CHUNK])
        counts += np.bincount(chosen, minlength=k)
        far += int(np.count_nonzero(distance > buckets.max_aspect_error))
        worst = max(worst, float(distance.max()))
    ids = np.empty(n, dtype=np.uint32 if n <= 1 << 32 else np.int64)
    cursor = np.concatenate([[0], np.cumsum(counts)[:-1]])
    for lo in range(0, n, _CHUNK):
        chosen, _ = buckets.assign(heights[lo:lo + _CHUNK], widths[lo:lo + _CHUNK])
        order = np.argsort(chosen, kind="stable")
        grouped = chosen[order]
        first = np.searchsorted(grouped, np.arange(k))
        ids[cursor[grouped] + np.arange(len(grouped)) - first[grouped]] = lo + order
        cursor += np.bincount(chosen, minlength=k)
    ids.flags.writeable = False  # as a mapped index is
    return BucketIndex(ids, BucketSummary(n, tuple(counts.tolist()), far, worst))


def _find(directory: Path, prefix: str, count: int, buckets: int,
          always_hash: bool) -> BucketIndex | None:
    with contextlib.suppress(OSError):  # no directory yet: nothing built
        for path in sorted(directory.glob(f"{prefix}*.npy")):
            found = _load_intact(path, count, buckets, always_hash)
            if found is not None:
                return found
    return None


def _load_intact(path: Path, count: int, buckets: int, always_hash: bool) -> BucketIndex | None:
    """The index in the file, if it holds what its name and summary say (else removed)."""
    found = load_intact(path, BucketSummary.from_json,
                        lambda ids, summary: ids.ndim == 1 and ids.dtype in (np.uint32, np.int64)
                        and len(ids) == count == summary.count
                        and len(summary.counts) == buckets and sum(summary.counts) == count,
                        _content_digest, always_hash)
    return None if found is None else BucketIndex(*found)


def _content_digest(ids: np.ndarray) -> str:
    return hash_bytes(memoryview(np.ascontiguousarray(ids)).cast("B")).split(":")[1][:16]
