"""Facts about the machine the toolkit runs on, and about this process."""

from __future__ import annotations

import os
from pathlib import Path


def available_cores() -> int:
    """CPUs this process may use (what a container or taskset allows, not the host's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def same_file(fd: int, path: Path) -> bool:
    """Whether `path` still names the file open as `fd` (not removed, nor replaced by a rename):
    a lock taken on a file another process has since replaced protects nothing."""
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)


_worker_process = False


def mark_worker_process() -> None:
    """Called first thing in a loader's worker process."""
    global _worker_process
    _worker_process = True


def in_worker() -> bool:
    """Whether this process is a loader's worker: its global state (random generators) is
    datapipe's own, not the training script's."""
    return _worker_process
