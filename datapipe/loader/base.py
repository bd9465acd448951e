"""What every datapipe loader shares: epochs, resumable position, passes, producer lifetime."""

from __future__ import annotations

import contextlib
import copy
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from datapipe.errors import ArgumentError, DataError
from datapipe.format.dataset import Dataset
from datapipe.loader.batch_loop import Plan
from datapipe.loader.distributed import check_group_unchanged
from datapipe.loader.lifetime import close_at_exit
from datapipe.loader.passes import OneThreadIterator, PassGuard
from datapipe.loader.progress_state import LoaderPosition, make_state, restore_position
from datapipe.pass_hooks import wrapped_pass
from datapipe.sampling.elastic import Remainder, follow

_CACHED_PLANS = 2  # the epoch under way and the next one, which workers start on early


def refuse_empty(ds: Dataset) -> None:
    """A dataset with nothing in it is an error, not an epoch of no batches: a training loop
    over it would run no step and report success."""
    if len(ds):
        return
    stats, why = ds.manifest.stats, ""
    if stats.get("inputs") and stats.get("rejected") == stats.get("inputs"):
        why = (f": all {stats['inputs']} inputs were rejected when it was converted (see "
               "rejects.jsonl beside the manifest)")
    raise DataError(f"{ds.directory}: the dataset is empty, 0 samples{why}")


class EpochSampler:
    """`loader.sampler`: where Lightning looks for `set_epoch` (`_set_sampler_epoch`); it
    forwards to the loader. Holds the loader weakly, so no cycle delays the loader's close."""

    def __init__(self, loader: LoaderBase) -> None:
        self._loader = weakref.ref(loader)

    def set_epoch(self, epoch: int) -> None:
        loader = self._loader()
        if loader is not None:
            loader.set_epoch(epoch)


class LoaderBase:
    """Subclasses set `self._producer`, `self.rank`, `self.world_size` and implement
    `_identity()`, `_epoch_start(epoch)` (the epoch's `Remainder` before any batch) and
    `_pass_batches()`, which begins with `_begin_epoch()`."""

    _producer: Any = None
    _prefetcher: Any = None  # downloads a remote dataset's next shards (prefetch.py)
    _prefetch_position: LoaderPosition | None = None  # what its process was forked with
    # The DataLoader attributes frameworks read. Lightning calls `sampler.set_epoch` and, having
    # found a sampler, reads `batch_sampler` too. No `dataset` attribute on purpose: Lightning
    # would try to rebuild the loader around a new sampler (`_update_dataloader`).
    batch_sampler = None

    def __init__(self, path: str | Path | None = None,
                 fields: Iterable[str] | None = None) -> None:
        self._position = LoaderPosition()
        self._plans: dict[tuple[int, tuple[Any, ...]], Any] = {}
        # Whoever wants per-batch timings (the profiler) sets this; None costs nothing.
        self.observer: Any = None
        self._pending: dict[int, dict[str, Any]] = {}
        self._passes = PassGuard(type(self).__name__ + (f"('{path}')" if path else ""))
        self.sampler = EpochSampler(self)
        self._fields_wanted = fields
        self.fields: tuple[str, ...] | None = None
        self._group_implicit = False  # rank and world size came from torch.distributed
        # At exit, before multiprocessing joins its children: ends a pass left open (a DALI
        # pipeline mid-epoch) and stops the workers, for scripts that never call close().
        close_at_exit(self)

    def _check_fields(self, available: Iterable[str]) -> None:
        """Validate `fields` against the keys this loader's batches have."""
        fields = self._fields_wanted
        if fields is None:
            return
        if not isinstance(fields, tuple | list) or not fields or \
                not all(isinstance(f, str) for f in fields):
            raise ArgumentError(f"fields must be a tuple of batch keys such as ('image', "
                                f"'label'), got {fields!r}")
        unknown = [f for f in fields if f not in available]
        if unknown:
            raise ArgumentError(f"fields: no {', '.join(map(repr, unknown))} in this loader's "
                                f"batches (they have {', '.join(available)})")
        self.fields = tuple(fields)

    def __iter__(self) -> Iterator[Any]:
        self._passes.check_process()  # a forked child: not its loader (passes.py)
        batches = wrapped_pass(self)  # `datapipe profile -- python train.py` wraps every pass
        return OneThreadIterator(batches if batches is not None else self._iterate(),
                                 self._passes.owner)

    def _iterate(self) -> Iterator[Any]:
        """One pass: each batch as a dict, or as the tuple `fields` names."""
        fields = self.fields
        for batch in self._passes.run(self._pass_batches):
            yield batch if fields is None else tuple(batch[f] for f in fields)

    def _pass_batches(self) -> Iterator[dict[str, Any]]:
        raise NotImplementedError

    def _record(self, b: int, meta: dict[str, Any], main: dict[str, float]) -> None:
        """Keep batch b's timings until it is handed out (batches are built ahead)."""
        if self.observer is not None:
            self._pending[b] = {"batch": b, "epoch": self._position.epoch,
                                "worker": meta.get("timing"), "queue": meta.get("queue"),
                                "main": main}

    def _report(self, b: int, **main: float) -> None:
        record = self._pending.pop(b, None)
        if record is not None and self.observer is not None:
            record["main"].update(main)
            self.observer.on_batch(record)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next pass iterates (as with DistributedSampler.set_epoch); a pass
        in progress ends (its iterator raises if advanced)."""
        self._passes.retire()
        self._position.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        return self._position.epoch

    def __len__(self) -> int:
        """Batches in the pass under way, or else in the pass the next `iter()` begins (a pass
        whose last batch is out counts as over: Lightning never asks past `len()`)."""
        under_way = self._passes.active and not self._position.epoch_finished
        epoch = self._position.epoch if under_way else self._position.next_pass()[0]
        return len(self._plan(epoch))

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the running workers (none before the first batch, nor without
        workers): for monitoring them, or checking that none outlived a run."""
        return list(getattr(self._producer, "worker_pids", []))

    def _identity(self) -> dict[str, Any]:
        raise NotImplementedError

    def _epoch_start(self, epoch: int) -> Remainder:
        raise NotImplementedError

    def _rank_plan(self, rest: Remainder, epoch: int) -> Any:
        return rest.rank_plan(self.rank, self.world_size)

    def _plan(self, epoch: int) -> Any:
        """This rank's batches of `epoch`, or of what was left of it at a resume from another
        world size. Built once per pass, not per batch, and kept: len(), the workers and the
        prefetcher ask again, and the producer knows a plan it started early by its identity."""
        lineage = self._position.lineage(epoch)
        plan = self._plans.get((epoch, lineage))
        if plan is None:
            while len(self._plans) >= _CACHED_PLANS:
                del self._plans[next(iter(self._plans))]
            plan = self._rank_plan(follow(self._epoch_start(epoch), lineage, epoch), epoch)
            self._plans[epoch, lineage] = plan
        return plan

    def _upcoming(self, epoch: int) -> tuple[Any, int]:
        """The plan most likely to follow, for the workers to start on early."""
        return self._plan(epoch), epoch

    def state_dict(self) -> dict[str, Any]:
        """Where this loader is (plain JSON-able data); a loader restored from it continues
        with the next unseen batch."""
        state = make_state(self._position, self._identity())
        state["progress"] = self.progress()  # for the record: a load recomputes it
        return state

    def progress(self) -> dict[str, dict[str, int]]:
        """What each source (a mixture's, or the one dataset) gave so far, by name."""
        raise NotImplementedError

    def _reweight(self, state: dict[str, Any]) -> bool:
        """A mixture loader made with reweight=True takes a state saved with other weights
        (True: its weights now continue the state's)."""
        return False

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a position: the next pass continues it (a pass in progress ends). The state
        may come from any rank, also of another world size: every rank then loads the same one
        and they share what is left of its epoch (sampling/elastic.py)."""
        reweighted = self._reweight(state)
        position = restore_position(state, self._identity(), self._epoch_start,
                                    reweighted=reweighted)
        self._passes.retire()
        self._position = position

    def _begin_epoch(self) -> tuple[int, int]:
        """(epoch, first batch) of the pass that is starting."""
        if self._group_implicit:
            check_group_unchanged(type(self).__name__, self.rank, self.world_size)
        start = self._position.begin_pass()
        self._prefetch_from(self._position.epoch, start)
        return self._position.epoch, start

    def _prefetch_from(self, epoch: int, batch: int) -> None:
        """Say which batch comes next, for a remote dataset's shard prefetcher (started on
        first use, before any worker, and anew when it would plan `epoch` otherwise)."""
        if self._prefetcher is not None and self._prefetch_is_stale(epoch):
            self._prefetcher.close()
            self._prefetcher = None
        if self._prefetcher is None:
            from datapipe.loader.prefetch import start_prefetch

            self._prefetcher = start_prefetch(getattr(self, "path", None),
                                              self._source_offsets(), self._plan)
            if self._prefetcher is None:
                return
            self._prefetch_position = copy.copy(self._position)
        self._prefetcher.advance(epoch, batch)

    def _source_offsets(self) -> Any:
        """A mixture's combined id of each source's first sample (None: one dataset)."""
        return None

    def _prefetch_is_stale(self, epoch: int) -> bool:
        """The prefetcher's process plans with its forked copy of the position: after a state
        loaded at another world size, or a whole pass over a resumed epoch, that copy's
        lineage of `epoch` is not the loader's, and it would fetch another plan's shards."""
        forked = self._prefetch_position
        return forked is None or forked.lineage(epoch) != self._position.lineage(epoch)

    def _handed_out(self, b: int, plan: Plan) -> None:
        """Count batch b as delivered: positions count what the caller got, not what was
        built ahead."""
        self._position.batches_done = b + 1
        self._position.epoch_finished = plan.is_last(b)
        if self._prefetcher is not None:
            self._prefetcher.advance(self._position.epoch, b + 1)

    def _finish_empty(self, start: int, plan: Plan) -> None:
        if not plan.has(start):
            self._position.epoch_finished = True

    def forget_inherited(self) -> None:
        """In a process forked from the loader's (the fork hook in lifetime.py calls it): the
        pass under way is cut off, and a remote dataset's prefetcher is left to the parent."""
        self._passes.disown()
        if self._prefetcher is not None:
            self._prefetcher.forget_inherited()

    def close(self) -> None:
        """Stop the workers and free their buffers (also done at exit if nobody calls it).
        In a forked child it does nothing: the workers, the pass and the cache are the
        parent's, and it goes on using them."""
        if self._passes.foreign:
            return
        with contextlib.suppress(ArgumentError):  # another thread is fetching: its problem
            self._passes.retire()
        if self._producer is not None:
            self._producer.close()
        if self._prefetcher is not None:
            self._prefetcher.close()
        self._settle_cache()

    def _settle_cache(self) -> None:
        """Workers and the prefetcher end without releasing their shards one by one (their
        locks go with their processes), so nothing evicts what shards they held in use pushed
        past a remote dataset's cache limit: that is done here, once they are gone."""
        from datapipe.format.sources import RemoteLocation

        path = getattr(self, "path", None)
        for location in path if isinstance(path, tuple) else (path,):
            if isinstance(location, RemoteLocation):
                from datapipe.format.cache import ShardCache

                with contextlib.suppress(OSError):  # a read-only cache evicts nothing
                    ShardCache(location.cache).make_room(0)

    def __enter__(self) -> LoaderBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.close()
