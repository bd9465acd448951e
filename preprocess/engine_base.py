"""What every engine shares: the interface a converter calls, the bounded window that keeps
results in task order, and the environment that keeps each worker to one thread. The engines
(engine.py, ray_engine.py) build on it; engine.py also picks one by name."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

C = TypeVar("C")
T = TypeVar("T")
R = TypeVar("R")


class Engine(Protocol):
    workers: int
    max_task_inputs: int  # most inputs (images) worth putting in one task

    def map_ordered(self, work: Callable[[C, T], R], context: C,
                    tasks: Iterable[T]) -> Iterator[R]:
        """`work(context, task)` for every task, yielded in task order."""

    def close(self) -> None:
        """Give back the engine's workers."""


def ordered_window(submit: Callable[[T], Any], wait: Callable[[Any], R], tasks: Iterable[T],
                   ahead: int) -> Iterator[R]:
    """Submit up to `ahead` tasks beyond the one awaited, yield their results in order.

    Bounded, unlike Pool.imap: a converter that streams its inputs (text) never reads far ahead
    of what the workers have done."""
    pending: deque[Any] = deque()
    for task in tasks:
        pending.append(submit(task))
        if len(pending) > ahead:
            yield wait(pending.popleft())
    while pending:
        yield wait(pending.popleft())


# One worker per core: a tokenizer's own thread pool would only oversubscribe them.
SINGLE_THREADED = {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
