"""Whether a loader's batch buffers fit in memory, checked when the loader is made.

A loader holds a few batches at once (those the workers are building, plus spares), each in a
buffer sized for the largest batch it can be given. Without this check a setting that cannot
fit (a batch_size of 10**9, a 100,000-pixel crop) is found out by the kernel, which kills a
worker mid-epoch. The buffers are memfds or anonymous shared maps, i.e. shmem charged to RAM
and to the memory cgroup, not to /dev/shm (a container's 64 MB /dev/shm does not limit them):
so they are measured against the memory the machine, or the container, has available.
"""

from __future__ import annotations

from pathlib import Path

from datapipe.errors import ArgumentError
from datapipe.sizes import format_size

# Where a memory cgroup states its limit: cgroup v2 (a container's own), then v1.
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def available_memory() -> int | None:
    """Bytes that new buffers can still get: the kernel's MemAvailable, no more than the memory
    cgroup's limit; None where it cannot be known (no /proc: macOS)."""
    try:
        meminfo = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in meminfo.splitlines() if ":" in line)
    if "MemAvailable" not in fields:
        return None
    available = int(fields["MemAvailable"].split()[0]) * 1024
    limit = _cgroup_limit()
    return available if limit is None else min(available, limit)


def _cgroup_limit() -> int | None:
    for path in _CGROUP_LIMITS:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        return int(text) if text.isdigit() else None  # "max": no limit
    return None


def check_buffers_fit(owner: str, batch: str, nbytes: int, buffers: str, count: int,
                      remedy: str) -> None:
    """Refuse `count` buffers of `nbytes` (`batch` says what one holds, `buffers` why there are
    `count`) when they need more memory than is available; `remedy` says what to lower."""
    available = available_memory()
    needed = nbytes * count
    if available is None or needed <= available:
        return
    raise ArgumentError(f"{owner}: {batch} takes {format_size(nbytes)}, and {count} such "
                        f"buffers ({buffers}) need {format_size(needed)}, but only "
                        f"{format_size(available)} of memory is available; lower {remedy}")
