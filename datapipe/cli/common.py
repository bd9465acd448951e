"""What every `datapipe` command shares: help settings, the progress bar, the cache options."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Progress:
    """A tqdm bar on a terminal; silent otherwise (the summary line says it all)."""

    def __init__(self, total: int | None, unit: str) -> None:
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit=unit, dynamic_ncols=True, smoothing=0.1)

    def update_to(self, done: int, *_: Any) -> None:
        if self.bar is not None:
            self.bar.update(done - self.bar.n)

    def update_with_total(self, done: int, total: int) -> None:
        """For work whose total is known only once it has started."""
        if self.bar is not None and self.bar.total is None:
            self.bar.reset(total=total)
        self.update_to(done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def add_options(func: Callable[..., Any], options: list[Callable[..., Any]]) -> Any:
    """Apply click options in the order they are listed (and shown in --help)."""
    for option in reversed(options):
        func = option(func)
    return func


def cache_options(func: Callable[..., Any]) -> Any:
    return add_options(func, [
        click.option("--cache-dir", default=None, help="Where shards of a URL dataset are "
                     "cached on this node [default: $DATAPIPE_CACHE_DIR, else "
                     "~/.cache/datapipe]."),
        click.option("--cache-size", default=None, help="Most bytes the cache may hold, e.g. "
                     "200GB; least recently used shards go first [default: "
                     "$DATAPIPE_CACHE_SIZE, else 100GB]."),
    ])


def join(location: Any, name: str) -> str:
    """NAME inside a dataset's folder or URL, as the user would write it."""
    return f"{str(location).rstrip('/')}/{name}"
