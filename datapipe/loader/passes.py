"""One pass at a time: which iterator of a loader is live, and who may advance it.

A loader has one producer (worker pool, prefetched slots, DALI pipeline), so it runs one pass
at a time. A new pass (an `iter()` at its first `next()`) retires the one before it, as do
`set_epoch` and `load_state_dict`: a framework that abandons an iterator (a sanity check that
stops after two batches, `limit_val_batches`) then starts the next pass cleanly. An iterator
that was retired, or one advanced while another thread is fetching a batch from the same
loader, raises a one-line `ArgumentError` instead of waiting forever for batches that belong
to someone else. So does an iterator advanced by a thread other than the one that took its
first batch (`OneThreadIterator`).

A loader belongs to the process that made it: its workers' queues and the pass under way are
that process's. A child forked from it (`os.fork`, multiprocessing's "fork") that calls
`iter()` or `next()` on the inherited loader gets a one-line `ArgumentError`, and takes nothing
from the parent's queues. `iter()` and a pass's start compare process ids (once per pass); a
pass under way at the fork is cut off in the child by `disown()`, which the fork hook calls
(lifetime.py), so the owner's batches cost no check at all.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from threading import get_ident
from typing import Any

from datapipe.errors import ArgumentError

_END = object()


class PassGuard:
    def __init__(self, owner: str) -> None:
        self.owner = owner  # how messages name the loader
        self._lock = threading.Lock()  # held while a batch is being fetched
        self._current: object | None = None  # the live pass
        self._batches: Iterator[Any] | None = None  # its producing generator
        self.owner_pid = os.getpid()
        self._inherited: Iterator[Any] | None = None  # the parent's pass, in a forked child

    @property
    def foreign(self) -> bool:
        """This process is not the one that made the loader (a child forked from it)."""
        return os.getpid() != self.owner_pid

    def check_process(self) -> None:
        if self.foreign:
            raise ArgumentError(self._foreign_message())

    def _foreign_message(self) -> str:
        return (f"{self.owner}: this loader belongs to process {self.owner_pid}, and this is "
                f"process {os.getpid()}, forked from it; make a new loader in the child (its "
                "workers and batches are the parent's)")

    def disown(self) -> None:
        """In a forked child, right after the fork: the pass under way answers its next batch
        with the one-line error. The parent's generator is kept, not closed: its clean-up is
        the parent's to run, and nothing may run it in the middle of a fork."""
        if self._batches is not None and self._inherited is None:
            self._inherited, self._batches = self._batches, _refusal(self._foreign_message())

    @property
    def active(self) -> bool:
        """A pass has begun and has not ended (finished, closed or retired)."""
        return self._current is not None

    def run(self, make_batches: Callable[[], Iterator[Any]]) -> Iterator[Any]:
        """Yield the batches of a new pass, begun (and the previous pass retired) at the first
        `next()`: merely calling `iter()` (Lightning does, to check a loader) changes nothing."""
        token = object()
        started = False
        try:
            while True:
                self._acquire()
                try:
                    if not started:
                        self.check_process()
                        self._retire_current()
                        self._current, self._batches = token, make_batches()
                        started = True
                    elif self._current is not token:
                        raise ArgumentError(
                            f"{self.owner}: this iterator was left behind: a newer iter(), "
                            "set_epoch or load_state_dict has moved the loader on (a loader "
                            "runs one pass at a time; make one loader per concurrent reader)")
                    batch = next(self._batches, _END)  # type: ignore[arg-type]
                finally:
                    self._lock.release()
                if batch is _END:
                    return
                yield batch
        finally:
            if started:
                self._finish(token)

    def retire(self) -> None:
        """End the live pass (for set_epoch and load_state_dict, which move the loader)."""
        self._acquire()
        try:
            self._retire_current()
        finally:
            self._lock.release()

    def _acquire(self) -> None:
        if not self._lock.acquire(blocking=False):
            self.check_process()  # forked while another thread was fetching
            raise ArgumentError(
                f"{self.owner}: another thread is fetching a batch from this loader right now; "
                "a loader feeds one thread at a time (make one loader per thread, or hand its "
                "batches on through a queue)")

    def _retire_current(self) -> None:
        batches, self._batches, self._current = self._batches, None, None
        if batches is not None:
            batches.close()  # runs the producer's clean-up now, before another pass starts

    def _finish(self, token: object) -> None:
        """The pass's iterator ended (exhausted, failed, closed or collected). If the lock is
        taken, another thread is starting a pass: that retires this one."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._current is token:
                self._retire_current()
        finally:
            self._lock.release()


def _refusal(message: str) -> Iterator[Any]:
    raise ArgumentError(message)
    yield  # a generator: raises at its first next()


class OneThreadIterator:
    """A pass's iterator, advanced only by the thread that took its first batch.

    A bare generator shared by two threads fails with `ValueError: generator already
    executing` when their calls overlap (before any loader code runs, so `PassGuard` never sees
    it), and silently deals the batches out between them when they do not. The check costs one
    comparison of thread ids per batch.
    """

    __slots__ = ("_batches", "_binding", "_owner", "_thread")

    def __init__(self, batches: Iterator[Any], owner: str) -> None:
        self._batches = batches
        self._owner = owner  # how messages name the loader
        self._thread: int | None = None
        self._binding = threading.Lock()  # two threads racing for the first batch: one wins

    def __iter__(self) -> OneThreadIterator:
        return self

    def __next__(self) -> Any:
        if self._thread != get_ident():
            self._bind()
        return next(self._batches)

    def _bind(self) -> None:
        with self._binding:
            if self._thread is None:
                self._thread = get_ident()
                return
        raise ArgumentError(
            f"{self._owner}: this iterator is being advanced from a thread other than the one "
            "that took its first batch; an iterator feeds one thread (make one loader per "
            "thread, or hand its batches on through a queue)")

    def close(self) -> None:
        """End the pass now, as a generator's close() would."""
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()
