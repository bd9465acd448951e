"""What a suite run is asked: which groups, how much data, how many runs, where results go."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datapipe.errors import ArgumentError

SUITES = ("images", "text", "convert", "gpu", "mixture", "patches", "scale")
# What `--suite all` runs: every suite but scale, whose corpora of up to 10^8 documents take GBs
# of disk and whose runs at that size take minutes each; it runs when named.
ALL_SUITES = tuple(s for s in SUITES if s != "scale")
SCALE_MAX = 10**8  # the scale suite's largest corpus by default


@dataclass(frozen=True)
class Options:
    suites: tuple[str, ...]
    repeats: int = 3
    photos: int = 2000
    text_mb: int = 20
    workers: int = 0  # 0: all cores
    out: Path = Path("bench-results")
    data: Path = Path("bench-data")  # generated inputs and converted forms, reused by later runs
    smoke: bool = False  # tiny data, one run per tool, no waiting for a quiet machine
    readme: Path | None = None  # a README.md whose bench region the results rewrite
    skip: frozenset[str] = frozenset()  # peers ("torch") or one group's peer ("images:torch")
    before: Path | None = None  # another checkout: datapipe's own peers run from it too
    settle: float = 10.0  # seconds to wait for other work to stop before each run
    retries: int = 2  # reruns of a conversion that other work disturbed
    scale_max: int = SCALE_MAX  # the scale suite's largest corpus: 10^5 ... 10^9 documents

    def __post_init__(self) -> None:
        unknown = set(self.suites) - set(SUITES)
        if unknown or not self.suites:
            raise ArgumentError(f"suites: {sorted(unknown) or 'none'}; choose from "
                                f"{', '.join(SUITES)}")
        if min(self.repeats, self.photos, self.text_mb) < 1 or self.workers < 0:
            raise ArgumentError("repeats, photos and text_mb must be at least 1, workers 0 "
                                "(all cores) or more")
        if self.scale_max not in [10**k for k in range(5, 10)]:
            raise ArgumentError(f"--scale-max: a power of ten from 100000 to 1000000000 (the "
                                f"scale suite's largest corpus), got {self.scale_max}")
        if self.smoke and self.readme is not None:
            raise ArgumentError("bench: --readme with --smoke would put smoke-test figures in "
                                "the README; run the full suite for it")
        if self.before is not None and not (self.before / "datapipe").is_dir():
            raise ArgumentError(f"--before {self.before}: not a datapipe checkout (it has no "
                                "datapipe/ folder)")

    @classmethod
    def smoke_test(cls, suites: tuple[str, ...], out: Path, workers: int = 2,
                   data: Path = Path("bench-data"), **more: Any) -> Options:
        # Enough photos that every worker's share fills a batch of 16 (WebDataset's shards
        # are split by worker, and the loaders check a full first batch).
        return cls(suites, repeats=1, photos=max(48, 32 * workers), text_mb=1, workers=workers,
                   out=out, data=data, smoke=True, settle=0.0, retries=0, **more)

    def skips(self, group: str, peer: str) -> bool:
        return peer in self.skip or f"{group}:{peer}" in self.skip


def parse_skip(text: str) -> frozenset[str]:
    """The names in a comma-separated --skip value."""
    return frozenset(filter(None, (name.strip() for name in text.split(","))))


