"""One writer per output folder: an exclusive flock on OUT/.datapipe-lock.

The kernel drops a flock when its holder's last descriptor closes, so a killed writer leaves
nothing stale: the next run simply takes the lock and resumes. The file's text (who, pid, host,
start time) is only read to name a running holder in the error a second writer gets.

The parts of a dataset written in parallel (DatasetWriter(part=...)) share the folder: each
holds the lock shared, so they write side by side while a converter, a single writer or the
merge of the parts, which take it exclusively, are refused until every part is done. Only an
exclusive holder removes the file, and only while it is the one holder.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from datapipe.errors import ArgumentError
from datapipe.system import same_file

LOCK_NAME = ".datapipe-lock"
_SHARED_HOLDER = {"shared": True}

# Descriptors of locks this process holds. A forked child (a conversion worker) closes its
# copies at once: a flock belongs to the open file, so a worker that outlived a killed parent
# would otherwise keep the lock held and refuse the rerun that should resume.
_HELD: set[int] = set()


def _close_inherited() -> None:
    for fd in _HELD:
        os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_close_inherited)


class OutputLock:
    """`label` names the folder in errors ("OUT /data/out"); `holder` says what this process
    is ("datapipe convert"), for the error another writer gets."""

    def __init__(self, directory: Path, label: str | None = None,
                 holder: str = "datapipe convert", shared: bool = False) -> None:
        self.directory = directory
        self.path = directory / LOCK_NAME
        self.label = label or f"OUT {directory}"
        self.holder = holder
        self.shared = shared
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise ArgumentError naming the writer that holds it."""
        mode = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        while self._fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _describe(os.pread(fd, 4096, 0))
                os.close(fd)
                raise ArgumentError(f"{self.label} is being written by {holder}; wait for it "
                                    "to end or write elsewhere") from None
            if same_file(fd, self.path):
                self._fd = fd
            else:  # a finishing holder removed the file between our open and flock: retry
                os.close(fd)
        _HELD.add(self._fd)
        holder = _SHARED_HOLDER if self.shared else {
            "by": self.holder, "pid": os.getpid(), "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %z")}
        # Shared holders all write the same text, so their writes cannot garble it.
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, (json.dumps(holder) + "\n").encode(), 0)

    def release(self) -> None:
        """Remove the file, then unlock: in that order no two runs can both hold a lock. A
        shared holder only unlocks: other parts may hold the file still."""
        if self._fd is None:
            return
        try:
            if not self.shared:
                self.path.unlink(missing_ok=True)
        finally:
            _HELD.discard(self._fd)
            os.close(self._fd)
            self._fd = None


def _describe(text: bytes) -> str:
    try:
        holder = json.loads(text)
        if holder.get("shared"):
            return "the parts of a parallel write (DatasetWriter part=...)"
        return (f"another {holder.get('by', 'datapipe convert')} (pid {holder['pid']} on "
                f"{holder['host']}, started {holder['started']})")
    except (ValueError, KeyError, TypeError, AttributeError):
        return "another writer, just starting"  # it holds the lock but has not said who yet
