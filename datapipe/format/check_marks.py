"""A node's record of the shard files that passed their cheap checks, so that the next process
to open an unchanged file skips the passes over its index.

The cheap checks (integrity.py) cost ~10 ns a row. A shuffled first batch opens every shard, so
without a record each worker of each run, and each resume, would pay for the whole corpus
before its first batch: seconds a worker at a billion rows. A marker says that the checks of
CHECKS_VERSION passed on one file, under one manifest:

    SIDE/.datapipe-checked/<digest of the shard's name and hash>
        {"shard", "hash", "manifest", "version", "size", "mtime_ns", "inode"}

SIDE is the dataset's side directory (its own folder; for a URL, the node's cache index). The
file is known by its stamp: size, mtime_ns and inode, which change when it is rewritten,
replaced, copied or touched, so such a file is checked again. A file changed in place that
keeps its size and has its mtime set back keeps its stamp: the marker still vouches for it
(verify="open" hashes the content whatever the markers say).

Only a file whose mtime is SETTLE_NS older than the moment its checks begin is marked: a write
within the same tick of the file system's clock as the checks could leave the stamp unchanged
(git's "racily clean" entries; a clock running behind the file server's just means no marker).
Markers are written atomically (a temporary file, then os.replace) and best effort: where the
side directory cannot be written, the checks run at every open. Within a process tree the
stamps checked are also kept in memory, so forked workers inherit them.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from datapipe.format.hashing import hash_bytes
from datapipe.format.manifest import ShardInfo

# Bump whenever a check that a marker stands for changes (integrity.check_shard_values, a
# reader's passes over its index): markers of another version are ignored.
CHECKS_VERSION = 1
MARKS_FOLDER = ".datapipe-checked"
SETTLE_NS = 2_000_000_000  # coarser than any file system's mtime resolution (FAT's: 2 s)

# Stamps checked by this process, or by its parent before the fork.
_checked: set[tuple] = set()


@dataclass(frozen=True)
class FileStamp:
    """What a shard file is, as stat tells it."""

    size: int
    mtime_ns: int
    inode: int
    device: int
    settled: bool = field(compare=False)  # its mtime was SETTLE_NS old when stamped


def file_stamp(path: Path) -> FileStamp | None:
    """The file's stamp now (None: it cannot be stat'ed; opening it will say why)."""
    now = time.time_ns()
    try:
        st = os.stat(path)
    except OSError:
        return None
    return FileStamp(st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev,
                     now - st.st_mtime_ns >= SETTLE_NS)


class CheckMarks:
    """The markers of one dataset: `side_directory` is where its derived files go,
    `manifest_digest` the hash of the manifest the checks were made against."""

    def __init__(self, side_directory: Path, manifest_digest: str) -> None:
        self.folder = side_directory / MARKS_FOLDER
        self.manifest_digest = manifest_digest

    def vouches(self, path: Path, info: ShardInfo, stamp: FileStamp) -> bool:
        """Whether the file at `path` with `stamp` passed its checks before, in this process
        tree or on this node."""
        if self._memory_key(path, info, stamp) in _checked:
            return True
        try:
            saved = json.loads(self._marker(info).read_text())
        except (OSError, ValueError):
            return False
        if saved != self._record(info, stamp):
            return False
        _checked.add(self._memory_key(path, info, stamp))
        return True

    def record(self, path: Path, info: ShardInfo, stamp: FileStamp) -> None:
        """Note that the file whose stamp was `stamp` before its checks passed them."""
        if not stamp.settled:
            return
        _checked.add(self._memory_key(path, info, stamp))
        marker = self._marker(info)
        tmp = marker.with_name(f"{marker.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(self._record(info, stamp)))
            os.replace(tmp, marker)  # a reader sees the old marker or this one, never half
        except OSError:  # read-only, full: no marker, the checks run at the next open
            with contextlib.suppress(OSError):
                tmp.unlink()

    def _marker(self, info: ShardInfo) -> Path:
        # Named by the shard's name and hash: a plain file name whatever the manifest says,
        # and one per file in a cache that several datasets share.
        return self.folder / hash_bytes(f"{info.name}\0{info.hash}".encode()).split(":")[1]

    def _record(self, info: ShardInfo, stamp: FileStamp) -> dict[str, object]:
        return {"shard": info.name, "hash": info.hash, "manifest": self.manifest_digest,
                "version": CHECKS_VERSION, "size": stamp.size, "mtime_ns": stamp.mtime_ns,
                "inode": stamp.inode}

    def _memory_key(self, path: Path, info: ShardInfo, stamp: FileStamp) -> tuple:
        return (str(path), stamp, info.hash, self.manifest_digest, CHECKS_VERSION)
