"""Worker processes never outlive the training process, however it ends.

- A worker does not run its parent's signal handlers: the dispositions a framework installed
  before the fork (Lightning's SIGTERM handler, a preemption checkpoint hook) go back to the
  default in the worker, so `terminate()` ends it. SIGINT is ignored: Ctrl-C reaches the whole
  process group, and the parent decides what happens to its workers.
- A worker dies with its parent: the kernel sends it SIGKILL when the parent dies
  (PR_SET_PDEATHSIG, Linux), and a thread in the worker checks its parent pid four times a
  second, which covers pools forked from a thread other than the main one (the kernel signal
  fires when the forking *thread* ends) and systems without prctl.
- At interpreter exit, live pools and producers are closed by an atexit hook that runs before
  multiprocessing's own: otherwise multiprocessing terminates and then joins daemonic workers
  with no timeout, which hangs for good on a worker that survives the SIGTERM.
- A process the script forks (`os.fork`, multiprocessing's "fork") forgets the loaders, pools
  and prefetchers it inherits: its exit, and its `close()` of an inherited loader, leave the
  parent's workers, buffers and prefetcher be, and its `iter()` or `next()` on one is refused
  in one line (passes.py) instead of taking the parent's batches from its workers' queues.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import multiprocessing.util  # noqa: F401  (its atexit hook must be registered before ours)
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from datapipe.system import mark_worker_process

PARENT_POLL_SECONDS = 0.25
_PR_SET_PDEATHSIG = 1
# Signals whose handler a worker must not inherit. SIGINT is handled apart (ignored).
_RESET = tuple(getattr(signal, name) for name in
               ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM",
                "SIGPROF", "SIGXCPU", "SIGXFSZ", "SIGCHLD", "SIGWINCH")
               if hasattr(signal, name))
_HELD = (*_RESET, signal.SIGINT)


@dataclass(frozen=True)
class Lifeline:
    """What a worker needs to die with its parent: made in the parent, used after the fork."""

    parent_pid: int
    forked_from_main_thread: bool

    @classmethod
    def here(cls) -> Lifeline:
        return cls(os.getpid(), threading.current_thread() is threading.main_thread())


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold (block) the reset signals across a fork: one arriving before the child has reset
    its handlers waits until it has, then gets the default action, not the parent's handler."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def become_worker(lifeline: Lifeline) -> None:
    """First thing in a forked worker: default signal handling, and death with the parent."""
    mark_worker_process()
    for sig in _RESET:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)
    if lifeline.forked_from_main_thread:
        _set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != lifeline.parent_pid:  # the parent died before the line above
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(lifeline.parent_pid,), daemon=True,
                     name="datapipe-parent-watch").start()
    # One intra-op thread, as torch's DataLoader gives its workers: a user's step that calls
    # torch per sample (torchvision v2) otherwise spreads over every core in every worker,
    # and the workers fight for them (the recipe group's run was 6x slower than torch's).
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def _set_parent_death_signal(sig: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the watching thread still covers it


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(PARENT_POLL_SECONDS)
    os._exit(1)  # orphaned: nobody will ask for this worker's batches


class Closable(Protocol):
    def close(self) -> None: ...


_open: weakref.WeakSet[Any] = weakref.WeakSet()


def close_at_exit(thing: Closable) -> None:
    """Close `thing` at interpreter exit if nobody has (it is held weakly: no leak)."""
    _open.add(thing)


def closed(thing: Closable) -> None:
    _open.discard(thing)


def _close_all() -> None:
    for thing in list(_open):
        with contextlib.suppress(Exception):
            thing.close()


def _forget_inherited() -> None:
    """In a forked child (a worker, or any process the script forks): the parent's loaders
    and pools are not its own. Otherwise its exit would close them, multiprocessing's exit
    hook would SIGTERM the parent's workers and prefetcher, which it finds among its inherited
    children, and a pass under way would go on reading the parent's queues."""
    for thing in list(_open):
        forget = getattr(thing, "forget_inherited", None)
        if forget is not None:
            forget()
    _open.clear()


# Registered after multiprocessing's hook (imported above), so it runs first: atexit runs
# hooks last-in, first-out.
atexit.register(_close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited)
