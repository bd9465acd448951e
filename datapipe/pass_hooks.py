"""How a layer above the loaders takes part in every pass without the loaders importing it.

`datapipe profile -- python train.py` profiles every loader of the script: the package
registers a wrapper here when it is imported (datapipe/__init__.py), and each `iter()` of a
loader asks it for the pass's batches. The loaders thus stay below the profiler, and this
module stays free of torch, so `import datapipe` costs nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

# Given a loader, its pass's batches as the wrapper yields them; None: the loader's own.
PassWrapper = Callable[[Any], Iterator[Any] | None]

_wrapper: PassWrapper | None = None


def set_pass_wrapper(wrapper: PassWrapper | None) -> None:
    global _wrapper
    _wrapper = wrapper


def wrapped_pass(loader: Any) -> Iterator[Any] | None:
    """The batches of `loader`'s pass through the registered wrapper, or None without one."""
    return _wrapper(loader) if _wrapper is not None else None
