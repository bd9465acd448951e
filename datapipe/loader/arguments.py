"""The loaders' scalar arguments, checked where they are given: a count is an integer and a flag
a bool, or the caller gets an `ArgumentError` naming the argument now, not a `TypeError` from
deep inside the first batch (or, for a flag, a string "False" that reads as true)."""

from __future__ import annotations

from typing import Any

import numpy as np

from datapipe.errors import ArgumentError


def check_counter(name: str, value: Any, minimum: int = 0) -> int:
    """An integer (NumPy integers too; not a bool, nor a float however whole) of at least
    `minimum`, as an int: a count, a size, a seed or an epoch."""
    whole = not isinstance(value, bool) and hasattr(value, "__index__")
    if whole and value.__index__() >= minimum:
        return value.__index__()
    if minimum == 0:
        raise ArgumentError(f"{name} must be a non-negative integer, got {value!r}")
    kind = "" if whole else "an integer "
    raise ArgumentError(f"{name} must be {kind}>= {minimum}, got {value!r}")


def check_optional(name: str, value: Any, minimum: int = 0) -> int | None:
    """`check_counter` for an argument that may be left out (None)."""
    return None if value is None else check_counter(name, value, minimum)


def check_flag(name: str, value: Any) -> bool:
    """True or False (NumPy's too)."""
    if not isinstance(value, bool | np.bool_):
        raise ArgumentError(f"{name} must be True or False, got {value!r}")
    return bool(value)
