"""Facts about the machine the toolkit runs on."""

from __future__ import annotations

import os


def available_cores() -> int:
    """CPUs this process may use (what a container or taskset allows, not the host's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
