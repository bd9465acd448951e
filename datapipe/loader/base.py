"""What every datapipe loader shares: epochs, resumable position, producer lifetime."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from datapipe.loader.progress_state import LoaderPosition, make_state, restore_position


class LoaderBase:
    """Subclasses set `self._producer` and implement `_identity()` and `_iterate()`."""

    _producer: Any = None
    _prefetcher: Any = None  # downloads a remote dataset's next shards (format/prefetch.py)

    def __init__(self) -> None:
        self._position = LoaderPosition()
        # Whoever wants per-batch timings (the profiler) sets this; None costs nothing.
        self.observer: Any = None
        self._pending: dict[int, dict[str, Any]] = {}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        from datapipe.profiling.auto import auto_profiler

        profiler = auto_profiler()  # `datapipe profile -- python train.py` switches this on
        if profiler is not None:
            return profiler.wrap(self)
        return self._iterate()

    def _iterate(self) -> Iterator[dict[str, Any]]:
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
        """Select the epoch to iterate (as with DistributedSampler.set_epoch)."""
        self._position.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        return self._position.epoch

    def _identity(self) -> dict[str, Any]:
        raise NotImplementedError

    def _plan(self, epoch: int) -> Any:
        raise NotImplementedError

    def _upcoming(self, epoch: int) -> tuple[Any, int]:
        """The plan most likely to follow, for the workers to start on early."""
        return self._plan(epoch), epoch

    def state_dict(self) -> dict[str, Any]:
        """Where this loader is (plain JSON-able data); a loader restored from it continues
        with the next unseen batch."""
        return make_state(self._position, self._identity())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._position = restore_position(state, self._identity())

    def _begin_epoch(self) -> tuple[int, int]:
        """(epoch, first batch) of the iteration that is starting."""
        start = self._position.begin_iteration()
        self._prefetch_from(self._position.epoch, start)
        return self._position.epoch, start

    def _prefetch_from(self, epoch: int, batch: int) -> None:
        """Say which batch comes next, for a remote dataset's shard prefetcher (started on
        first use, before any worker)."""
        if self._prefetcher is None:
            from datapipe.format.sources import RemoteLocation

            location = getattr(self, "path", None)
            if not isinstance(location, RemoteLocation):
                return
            from datapipe.format.prefetch import ShardPrefetcher

            self._prefetcher = ShardPrefetcher(location, self._plan)
        self._prefetcher.advance(epoch, batch)

    def _handed_out(self, b: int, num_batches: int) -> None:
        """Count batch b as delivered: positions count what the caller got, not what was
        built ahead."""
        self._position.batches_done = b + 1
        self._position.epoch_finished = b + 1 == num_batches
        if self._prefetcher is not None:
            self._prefetcher.advance(self._position.epoch, b + 1)

    def _finish_empty(self, start: int, num_batches: int) -> None:
        if start == num_batches:
            self._position.epoch_finished = True

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
        if self._prefetcher is not None:
            self._prefetcher.close()

    def __enter__(self) -> LoaderBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.close()
