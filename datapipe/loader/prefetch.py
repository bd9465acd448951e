"""Downloads the shards the next batches will read, ahead of the processes that read them.

A loader over a remote dataset starts one prefetch process. The epoch plan says which samples,
so which shards, each batch reads; the loader publishes only where it is (epoch, next batch)
in shared memory, two integer stores per batch, so the training thread pays nothing for it.
The prefetcher walks the plan from there and downloads, a few at a time, the shards that are
not cached yet, in the order they will be needed, until the upcoming shards fill half the
cache (the other half is for the shards in use). Workers fetch whatever it has not reached
yet themselves; the cache's per-shard lock makes sure no shard is downloaded twice.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from datapipe.format.manifest import Manifest
from datapipe.loader.lifetime import Lifeline, become_worker, signals_held

_POLL_SECONDS = 0.05
_PARALLEL_DOWNLOADS = 4


class ShardPrefetcher:
    """The prefetch process of one remote dataset of a loader; `advance(epoch, batch)` says
    what comes next. For a mixture's source, `window` is (first, end) of its combined ids
    (the plan's other ids are other sources') and `share` its part of the cache's half."""

    def __init__(self, location: Any, plan_for: Callable[[int], Any],
                 window: tuple[int, int] | None = None, share: float = 1.0) -> None:
        context = mp.get_context("fork")  # inherits the plan function: nothing to pickle
        self._progress = context.RawArray("q", [-1, 0])  # epoch, next batch
        self._stop = context.Event()
        # Like a loader worker: the parent's signal handlers (a framework's SIGTERM hook) do not
        # run in it, and it dies with its parent even in the middle of a download.
        self._process = context.Process(
            target=_run, args=(location, plan_for, self._progress, self._stop, Lifeline.here(),
                               window, share),
            daemon=True, name="datapipe-prefetch")
        with signals_held():
            self._process.start()

    def advance(self, epoch: int, batch: int) -> None:
        self._progress[1] = batch
        self._progress[0] = epoch

    def forget_inherited(self) -> None:
        """In a process forked from the loader's: the prefetcher is not its child, so that
        multiprocessing's exit hook there does not SIGTERM it."""
        getattr(mp.process, "_children", set()).discard(self._process)
        self._process = None  # nor does a close() there stop it

    def close(self) -> None:
        if self._process is None:
            return
        self._stop.set()
        self._process.join(timeout=2)
        if self._process.is_alive():
            self._process.terminate()  # a download in progress leaves only a part file
            self._process.join(timeout=2)
        self._process = None


class PrefetchGroup:
    """The prefetchers of a loader's remote datasets (one, or a mixture's remote sources)."""

    def __init__(self, prefetchers: list[ShardPrefetcher]) -> None:
        self.prefetchers = prefetchers

    def advance(self, epoch: int, batch: int) -> None:
        for prefetcher in self.prefetchers:
            prefetcher.advance(epoch, batch)

    def forget_inherited(self) -> None:
        for prefetcher in self.prefetchers:
            prefetcher.forget_inherited()

    def close(self) -> None:
        for prefetcher in self.prefetchers:
            prefetcher.close()


def start_prefetch(path: Any, offsets: np.ndarray | None,
                   plan_for: Callable[[int], Any]) -> PrefetchGroup | None:
    """A prefetcher per remote dataset of `path` (a location, or a mixture's tuple of them
    with its sources' combined-id `offsets`); None where every dataset is local. A node's
    cache is shared, so a mixture's remote sources share its prefetch half evenly."""
    from datapipe.format.sources import RemoteLocation

    locations = path if isinstance(path, tuple) else (path,)
    remote = [s for s, location in enumerate(locations) if isinstance(location, RemoteLocation)]
    if not remote:
        return None
    if offsets is None:
        return PrefetchGroup([ShardPrefetcher(locations[0], plan_for)])
    return PrefetchGroup([ShardPrefetcher(locations[s], plan_for,
                                          (int(offsets[s]), int(offsets[s + 1])),
                                          1 / len(remote)) for s in remote])


class ShardWalk:
    """The shards each batch of `plan` reads, in order of first use within the batch (of a
    mixture's source, its ids within `window`, counted from its start), found as the look-ahead
    reaches a batch and forgotten once the loader is past it: what it costs is the batches
    ahead, never a walk of the whole plan (10^9 samples are millions of batches)."""

    def __init__(self, plan: Any, shard_starts: np.ndarray,
                 window: tuple[int, int] | None = None) -> None:
        self.plan, self.shard_starts, self.window = plan, shard_starts, window
        self._found: dict[int, np.ndarray] = {}

    def shards(self, b: int) -> np.ndarray:
        found = self._found.get(b)
        if found is None:
            indices = self.plan.batch(b)[0]
            if self.window is not None:
                lo, hi = self.window
                indices = indices[(indices >= lo) & (indices < hi)] - lo
            found = np.unique(np.searchsorted(self.shard_starts, indices, side="right") - 1)
            self._found[b] = found
        return found

    def forget_before(self, b: int) -> None:
        for done in [k for k in self._found if k < b]:
            del self._found[done]


def upcoming_shards(walk: ShardWalk, batch: int, sizes: np.ndarray, budget: int) -> list[int]:
    """Shards read from `batch` on, in order of first need, while they fit `budget` bytes
    (always at least one). The walk stops there, or once every shard is chosen."""
    walk.forget_before(batch)
    chosen: dict[int, None] = {}
    total = 0
    for b in range(batch, len(walk.plan)):
        for k in walk.shards(b).tolist():
            if k in chosen:
                continue
            if chosen and total + sizes[k] > budget:
                return list(chosen)
            chosen[k] = None
            total += int(sizes[k])
        if len(chosen) == len(sizes):
            break
    return list(chosen)


def _run(location: Any, plan_for: Callable[[int], Any], progress: Any, stop: Any,
         lifeline: Lifeline, window: tuple[int, int] | None, share: float) -> None:
    from datapipe.format.sources import RemoteShards

    become_worker(lifeline)

    source = RemoteShards(location)
    manifest: Manifest = source.load_manifest()
    sizes = np.array([s.bytes for s in manifest.shards], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum([s.rows for s in manifest.shards])])
    budget = int(source.cache.settings.limit * share) // 2
    epoch_seen, walk = None, None
    failed: set[int] = set()  # not tried again: the reader reports it when it gets there
    with ThreadPoolExecutor(_PARALLEL_DOWNLOADS) as pool:
        while not stop.is_set():
            epoch, batch = int(progress[0]), int(progress[1])
            if epoch < 0:
                time.sleep(_POLL_SECONDS)
                continue
            if epoch != epoch_seen:
                walk = ShardWalk(plan_for(epoch), starts, window)
                epoch_seen = epoch
            missing = [k for k in upcoming_shards(walk, batch, sizes, budget)
                       if k not in failed and not source.is_cached(manifest.shards[k])]
            if not missing:
                time.sleep(_POLL_SECONDS)
                continue
            for k, ok in zip(missing, pool.map(lambda k: _fetch(source, manifest, k),
                                               missing[:_PARALLEL_DOWNLOADS]), strict=False):
                if not ok:
                    failed.add(k)


def _fetch(source: Any, manifest: Manifest, k: int) -> bool:
    try:
        source.open(manifest.shards[k], "cheap").release()
    except Exception:  # the reader reports it, with its own message, when it needs the shard
        return False
    return True
