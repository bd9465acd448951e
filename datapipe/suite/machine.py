"""The machine a benchmark runs on: what it is (for the report), and how busy it is (so a run
that shared the cores with other work shows as such)."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from datapipe.system import available_cores

# Distributions whose versions the report names: the peers, and what every tool stands on.
VERSIONS = {"torch": ("torch",), "pillow-simd": ("pillow-simd",), "pillow": ("pillow",),
            "pyarrow": ("pyarrow",), "numpy": ("numpy",),
            "DALI": ("nvidia-dali-cuda130", "nvidia-dali-cuda120"), "kornia": ("kornia",),
            "webdataset": ("webdataset",), "litdata": ("litdata",), "datasets": ("datasets",),
            "tokenizers": ("tokenizers",), "datapipe": ("datapipe",)}


def installed(dist: str) -> str | None:
    """Version of an installed distribution, or None; never imports it."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _proc_field(path: str, key: str) -> str | None:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(":")
        if name.strip() == key:
            return value.strip()
    return None


def ram_gb() -> float:
    total_kb = _proc_field("/proc/meminfo", "MemTotal")
    return int(total_kb.split()[0]) / (1 << 20) if total_kb else float("nan")


def pil_description() -> str:
    from datapipe.doctor import pil_build

    pil = pil_build()
    turbo = "libjpeg-turbo" if pil["libjpeg_turbo"] else "no libjpeg-turbo"
    return f"{pil['build']} {pil['version']} ({turbo})"


def revision(root: Path | None = None) -> str:
    """The measured code: the checkout's (or `root`'s) commit ("+changes" when its tree
    differs), or the installed version where datapipe does not run from a git checkout."""
    import datapipe

    root = root or Path(datapipe.__file__).resolve().parent.parent

    def git(*args: str) -> str:
        result = subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                                text=True, check=False)
        return result.stdout.strip() if result.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") if (root / ".git").exists() else ""
    if not commit:
        return f"datapipe {installed('datapipe') or 'unknown'} (installed)"
    return commit + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def describe() -> dict[str, Any]:
    """The machine and the versions of every tool, as every report states them."""
    import torch

    versions = {label: next(filter(None, map(installed, dists)), None)
                for label, dists in VERSIONS.items()}
    return {"cpu": _proc_field("/proc/cpuinfo", "model name") or platform.processor()
            or "unknown CPU", "cores": available_cores(), "ram_gb": round(ram_gb(), 1),
            "python": platform.python_version(), "pil": pil_description(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
            "versions": versions, "platform": platform.platform(),
            "date": datetime.date.today().isoformat(), "revision": revision()}


def machine_line(info: dict[str, Any]) -> str:
    return (f"{info['cpu']}, {info['cores']} cores, {info['ram_gb']:.0f} GB RAM, "
            f"GPU: {info['gpu']}; Python {info['python']}, PIL: {info['pil']}")


# ---------------------------------------------------------------- how busy it is


def machine_busy_seconds() -> float:
    """CPU-seconds all CPUs have spent not idle since boot (steal included: lost to us)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def wait_for_quiet(limit_s: float, idle_cores: float = 0.2) -> float:
    """Wait up to limit_s for other work on the machine to stop; returns the seconds waited."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        busy = machine_busy_seconds()
        time.sleep(1.0)
        if machine_busy_seconds() - busy < idle_cores:
            break
    return time.perf_counter() - start
