"""User-facing errors: raised for bad input, printed by the CLI as one line."""

from __future__ import annotations


class DatapipeError(Exception):
    """A problem with the user's data or arguments, not a bug: the CLI prints it on one line."""


class DataError(DatapipeError, ValueError):
    """Bad or corrupt data: a file, shard, manifest or sample that cannot be used."""


class ArgumentError(DatapipeError, ValueError):
    """A setting or argument that is out of range or inconsistent."""
