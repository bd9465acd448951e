"""Writing a dataset to a URL (`datapipe convert ... s3://bucket/prefix`, a DatasetWriter):
shards are made in a local staging folder, then uploaded, the manifest last (its presence is
what makes a dataset complete, docs/FORMAT.md).

A killed upload resumes like a killed conversion: the staging folder keeps its journal until
everything is uploaded, so a rerun keeps every shard, and objects already in the store with
the manifest's size are not sent again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from datapipe.errors import ArgumentError
from datapipe.format.cache import CacheSettings
from datapipe.format.manifest import MANIFEST_NAME, Manifest
from datapipe.format.remote import RemoteDirectory

_PARALLEL_UPLOADS = 4


def staging_directory(url: str, staging: Path | None) -> Path:
    """Where a conversion to `url` writes its shards first: the same folder for the same URL,
    so that a rerun finds what a killed run left."""
    if staging is not None:
        return staging
    key = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]
    return CacheSettings.resolve().staging(key)


class RemoteTarget:
    """The URL a dataset goes to. `label` names it in errors ("OUT"), `overwrite` is the
    setting that replaces a finished dataset ("--overwrite")."""

    def __init__(self, url: str, is_ours: Callable[[str], bool], label: str = "OUT",
                 overwrite: str = "--overwrite") -> None:
        self.store = RemoteDirectory(url)
        self.url = self.store.url
        self.is_ours = is_ours
        self.label = label
        self.overwrite = overwrite

    def prepare(self, overwrite: bool) -> None:
        """Refuse a finished dataset (unless `overwrite`, which unpublishes it first) and a
        prefix holding objects datapipe did not write."""
        names = self.store.sizes()
        foreign = sorted(n for n in names if not self.is_ours(n))
        if foreign:
            raise ArgumentError(f"{self.label} {self.url} holds objects datapipe did not write "
                                f"({foreign[0]}, ...); choose an empty or new prefix")
        if MANIFEST_NAME in names:
            if not overwrite:
                raise ArgumentError(f"{self.label} {self.url} already holds a finished dataset; "
                                    f"pass {self.overwrite} to replace it")
            self.store.delete(MANIFEST_NAME)  # first: from now on it is not a dataset

    def upload(self, staging: Path, manifest: Manifest, side_files: list[str],
               resumed: bool = True) -> int:
        """Shards (not yet in the store, when `resumed`: see send), then `side_files`, then
        the manifest; then remove shards no longer listed (an overwritten dataset's). Returns
        the shards sent."""
        sent = self.send(staging, [s.name for s in manifest.shards], side_files,
                         {s.name: s.bytes for s in manifest.shards}, resumed)
        self.publish(manifest)
        return sent

    def send(self, staging: Path, shards: list[str], side_files: list[str],
             sizes: dict[str, int], resumed: bool) -> int:
        """`shards`, then `side_files`; returns the shards sent. When `resumed`, a shard the
        store holds with its size (`sizes`) is not sent again: a resumed conversion's shards
        are byte-identical to the ones a killed upload sent. Any other writer sends all: a
        shard of the same name and size may hold other samples."""
        present = self.store.sizes() if resumed else {}
        todo = [name for name in shards if present.get(name) != sizes[name]]
        with ThreadPoolExecutor(_PARALLEL_UPLOADS) as pool:
            list(pool.map(lambda name: self.store.upload(staging / name, name), todo))
        for name in side_files:
            self.store.upload(staging / name, name)
        return len(todo)

    def publish(self, manifest: Manifest) -> None:
        """The manifest, which makes the prefix a dataset; then remove shards it does not
        list (an overwritten dataset's, a failed part's)."""
        self.store.write_bytes(MANIFEST_NAME, manifest.to_bytes())
        listed = {s.name for s in manifest.shards}
        for name in self.store.sizes():
            if name.startswith("shard-") and name not in listed:
                self.store.delete(name)
