"""The Ray engine: a converter's tasks as Ray tasks on a cluster, results back in task order.

Ray is imported only here and only when this engine is made, so that `--engine local` (the
default) never needs it. The process running the command is the Ray driver: it reads the
results and is the one writer of OUT, so the journal, resume and the output bytes are the
local engine's. Workers read the inputs themselves (the context holds their paths), so every
node must see SRC at the same path.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from datapipe.errors import ArgumentError, DatapipeError
from preprocess.engine_base import SINGLE_THREADED, ordered_window

C = TypeVar("C")
T = TypeVar("T")
R = TypeVar("R")

INSTALL_HINT = "pip install 'datapipe[ray]' (or: pip install ray)"
CONNECT_TIMEOUT_S = 10.0
TASKS_AHEAD_PER_CPU = 2
TASK_RETRIES = 3  # a task whose worker or node died is run again; the work is pure


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ArgumentError(f"--engine ray needs Ray, which is not installed: {INSTALL_HINT}") \
            from None
    return ray


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of 'HOST:PORT' or 'ray://HOST:PORT'; None for 'auto' and the like."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """A one-line error, within `timeout`, when nothing listens at ADDR (ray.init would retry
    for a minute and then print a page of log)."""
    target = _host_port(address)
    if target is None:
        if address != "auto":
            raise ArgumentError(f"--address {address!r}: expected HOST:PORT, ray://HOST:PORT "
                                "or auto")
        return
    try:
        with socket.create_connection(target, timeout=timeout):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise ArgumentError(f"--address {address}: cannot reach a Ray cluster there "
                            f"({reason})") from None


def _run_task(work: Callable[[C, T], R], context: C, task: T) -> R:
    # One task per CPU Ray granted: a tokenizer's own thread pool would oversubscribe the node.
    os.environ.update(SINGLE_THREADED)
    return work(context, task)


class RayEngine:
    """Connects to the cluster at `address` (or RAY_ADDRESS, or starts a local instance) unless
    this process already is a Ray driver, whose cluster it then uses as it is."""

    max_task_inputs = 64  # a Ray task costs about a millisecond to schedule

    def __init__(self, address: str | None, workers: int) -> None:
        self.ray = _import_ray()
        self._owns_ray = not self.ray.is_initialized()
        if self._owns_ray:
            self._connect(address)
        cpus = int(self.ray.cluster_resources().get("CPU", 1))
        self.workers = min(workers, cpus) if workers > 0 else cpus
        self._remote = self.ray.remote(num_cpus=1, max_retries=TASK_RETRIES)(_run_task)

    def _connect(self, address: str | None) -> None:
        address = address or os.environ.get("RAY_ADDRESS")
        if address:
            check_reachable(address)
        try:
            self.ray.init(address=address, include_dashboard=False, log_to_driver=False,
                          logging_level="ERROR", configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise ArgumentError(f"--address {address or '(local)'}: cannot connect to Ray "
                                f"({first_line})") from None

    def map_ordered(self, work: Callable[[C, T], R], context: C,
                    tasks: Iterable[T]) -> Iterator[R]:
        context_ref = self.ray.put(context)
        yield from ordered_window(lambda task: self._remote.remote(work, context_ref, task),
                                  self._result, tasks, self.workers * TASKS_AHEAD_PER_CPU)

    def _result(self, ref: Any) -> Any:
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, DatapipeError):
                raise type(cause)(*cause.args) from None
            raise DatapipeError(f"a Ray task failed: {type(cause).__name__}: {cause}") \
                from None
        except self.ray.exceptions.RayError as exc:
            raise DatapipeError(f"Ray could not run a task: {type(exc).__name__}: "
                                f"{str(exc).strip().splitlines()[0]}") from None

    def close(self) -> None:
        if self._owns_ray and self.ray.is_initialized():
            self.ray.shutdown()
