"""Ordered parallel map over local processes: the local conversion engine."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def ordered_map(fn: Callable[[T], R], items: Iterable[T], workers: int,
                chunksize: int = 8) -> Iterator[R]:
    """Yield `fn(item)` in input order, computed by `workers` processes (in-process for 1).

    Results come back in order so that shard boundaries, and so the output bytes, do not depend
    on scheduling.
    """
    if workers <= 1:
        yield from map(fn, items)
        return
    # fork: workers inherit imported modules, so start-up costs milliseconds, not seconds.
    context = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    pool = context.Pool(workers)
    try:
        yield from pool.imap(fn, items, chunksize=chunksize)
        pool.close()
    finally:
        pool.terminate()
        pool.join()
