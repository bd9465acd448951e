"""Where a dataset's files come from: a local directory, or a URL read through the node's cache.

Either source hands the Dataset a local path per shard; a remote shard is downloaded into the
cache first (hash-checked as it streams in, refetched once when it does not match the
manifest) and held in use until the reader closes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from datapipe.errors import DataError
from datapipe.format.cache import CacheSettings, CorruptDownload, PinnedFile, ShardCache
from datapipe.format.hashing import hash_bytes, hash_file
from datapipe.format.integrity import check_shard_hash, shard_file_problem
from datapipe.format.manifest import MANIFEST_NAME, Manifest, ShardInfo
from datapipe.format.remote import MissingObject, RemoteDirectory, is_url, local_path


@dataclass(frozen=True)
class RemoteLocation:
    """A dataset URL and the node-local cache its shards go through; prints as the URL."""

    url: str
    cache: CacheSettings

    def __str__(self) -> str:
        return self.url


Location = Path | RemoteLocation


def resolve_location(path: str | Path | RemoteLocation, cache_dir: str | Path | None = None,
                     cache_size: int | str | None = None) -> Location:
    """A local path, or a URL with its cache settings (see CacheSettings.resolve)."""
    if isinstance(path, RemoteLocation):
        return path
    if is_url(path):
        return RemoteLocation(str(path).rstrip("/"), CacheSettings.resolve(cache_dir, cache_size))
    return local_path(path)


class ShardFile(Protocol):
    path: Path

    def release(self) -> None: ...


@dataclass
class _LocalFile:
    path: Path

    def release(self) -> None:
        pass


class LocalShards:
    """A dataset directory on a local (or network-mounted) filesystem."""

    remote = False

    def __init__(self, directory: Path) -> None:
        self.location = directory
        self.side_directory = directory  # derived files (length index) live beside the shards

    def load_manifest(self) -> Manifest:
        return Manifest.load(self.location)

    def manifest_digest(self) -> str:
        return hash_file(self.location / MANIFEST_NAME)

    def where(self, name: str) -> str:
        return str(self.location / name)

    def max_open(self, manifest: Manifest) -> int:
        return 0  # no limit: nothing is evicted

    def hash_problem(self, info: ShardInfo) -> str | None:
        """What is wrong with the shard file against its manifest entry (None: intact)."""
        return shard_file_problem(self.location / info.name, info)

    def open(self, info: ShardInfo, verify: str, fresh: bool = False) -> ShardFile:
        path = self.location / info.name
        if verify == "open":
            check_shard_hash(path, info)
        return _LocalFile(path)


class RemoteShards:
    """A dataset under a URL: manifest read from the store, shards through the cache."""

    remote = True

    def __init__(self, location: RemoteLocation) -> None:
        self.location = location
        self.store = RemoteDirectory(location.url)
        self.cache = ShardCache(location.cache)
        self.side_directory = self.cache.index_directory
        self._digest = ""

    def load_manifest(self) -> Manifest:
        where = self.store.where(MANIFEST_NAME)
        try:
            data = self.store.read_bytes(MANIFEST_NAME)
        except MissingObject:
            raise DataError(f"{where}: missing; is this a finished datapipe dataset?") from None
        try:
            obj = json.loads(data)
        except ValueError as exc:
            raise DataError(f"{where}: unreadable manifest ({exc})") from None
        self._digest = hash_bytes(data)
        return Manifest.from_json(obj, source=where)

    def manifest_digest(self) -> str:
        return self._digest

    def where(self, name: str) -> str:
        return self.store.where(name)

    def is_cached(self, info: ShardInfo) -> bool:
        return self.cache.has(_cache_key(info), info.name)

    def open(self, info: ShardInfo, verify: str, fresh: bool = False) -> PinnedFile:
        """The shard in the cache, held in use. `fresh` throws away a cached copy first (it
        failed a check)."""
        key = _cache_key(info)
        if fresh:
            self.cache.discard(key, info.name)
        pinned = self._fetch(key, info)
        if verify == "open":
            try:
                check_shard_hash(pinned.path, info)  # a copy damaged since it was cached
            except DataError:
                pinned.release()
                self.cache.discard(key, info.name)
                pinned = self._fetch(key, info)
        return pinned

    def _fetch(self, key: str, info: ShardInfo) -> PinnedFile:
        where = self.where(info.name)
        for attempt in range(2):
            try:
                return self.cache.fetch(key, info.name, info.bytes, info.hash, where,
                                        lambda: self.store.stream(info.name))
            except CorruptDownload as exc:
                if attempt:
                    raise CorruptDownload(f"{exc}, again after fetching it a second time: the "
                                          f"object is corrupt or was replaced (run `datapipe "
                                          f"verify {self.location}`)") from None
        raise AssertionError("unreachable")

    def hash_problem(self, info: ShardInfo) -> str | None:
        """What is wrong with the stored object against its manifest entry (None: intact).
        Its size is asked first; its bytes are hashed as they stream into the cache, as a
        reader's are (a copy cached before is hashed again), where they stay for the reader's
        checks."""
        size = self.store.size(info.name)
        if size is None:
            return "missing"
        if size != info.bytes:
            return f"size {size} bytes, manifest says {info.bytes}"
        try:
            self.open(info, "open").release()
        except MissingObject:
            return "missing"
        except CorruptDownload:
            return "content hash differs from the manifest"
        return None

    def max_open(self, manifest: Manifest) -> int:
        """Shards a process keeps open (and so in use) at once: half the cache's worth, so
        that several processes on a node can share it without pinning all of it."""
        largest = max((s.bytes for s in manifest.shards), default=1)
        return max(1, self.cache.settings.limit // (2 * max(largest, 1)))


def _cache_key(info: ShardInfo) -> str:
    return info.hash.replace(":", "-")  # by content: a reconverted shard is another entry


def open_source(location: str | Path | RemoteLocation) -> LocalShards | RemoteShards:
    location = resolve_location(location)
    if isinstance(location, RemoteLocation):
        return RemoteShards(location)
    return LocalShards(location)
