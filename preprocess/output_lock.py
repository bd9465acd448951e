"""One writer per output directory: an exclusive flock on OUT/.datapipe-lock.

The kernel drops a flock when its holder's last descriptor closes, so a killed conversion leaves
nothing stale: the next run simply takes the lock and resumes. The file's text (pid, host, start
time) is only read to name a running holder in the error a second writer gets.
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
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise ArgumentError naming the conversion that holds it."""
        while self._fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _describe(os.pread(fd, 4096, 0))
                os.close(fd)
                raise ArgumentError(
                    f"OUT {self.directory} is being written by another datapipe convert "
                    f"({holder}); wait for it to end or choose another OUT") from None
            if same_file(fd, self.path):
                self._fd = fd
            else:  # a finishing holder removed the file between our open and flock: retry
                os.close(fd)
        _HELD.add(self._fd)
        holder = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": time.strftime("%Y-%m-%d %H:%M:%S %z")}
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, (json.dumps(holder) + "\n").encode(), 0)

    def release(self) -> None:
        """Remove the file, then unlock: in that order no two runs can both hold a lock."""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            _HELD.discard(self._fd)
            os.close(self._fd)
            self._fd = None


def _describe(text: bytes) -> str:
    try:
        holder = json.loads(text)
        return f"pid {holder['pid']} on {holder['host']}, started {holder['started']}"
    except (ValueError, KeyError, TypeError):
        return "just starting"  # it holds the lock but has not written who it is yet
