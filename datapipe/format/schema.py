"""Column types of a shard: a small vocabulary both shard formats understand."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from datapipe.errors import DataError

# Fixed-width numbers, as scalars and as the elements of arrays.
NUMBER_TYPES = {name: np.dtype(name) for name in (
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64")}
SCALAR_TYPES = NUMBER_TYPES
TOKEN_DTYPES = {"uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32}
OTHER_TYPES = ("bytes", "string")
# "float32[]": a 1-D array of any length per sample; "uint8[32,32,3]": an array of that shape.
_ARRAY = re.compile(r"([a-z0-9]+)\[((?:[1-9][0-9]*)(?:,[1-9][0-9]*)*)?\]")


@dataclass(frozen=True)
class Column:
    """One column: `bytes` (encoded image, raw pixels), `string`, a scalar number (`int8` ...
    `uint64`, `float16`, `float32`, `float64`), `tokens:<uint8|uint16|uint32>` (a
    variable-length id array per sample), or an array of numbers: `float32[]` (any length)
    or `float32[512]`, `uint8[32,32,3]` (that shape)."""

    name: str
    type: str

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise DataError(f"column name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.type, str):
            raise DataError(f"column {self.name!r}: type {self.type!r} is not a string")
        if not (self.is_scalar or self.is_tokens or self.is_array or self.type in OTHER_TYPES):
            raise DataError(f"column {self.name!r} has unknown type {self.type!r}")

    @property
    def is_scalar(self) -> bool:
        return self.type in SCALAR_TYPES

    @property
    def is_tokens(self) -> bool:
        return self.type.startswith("tokens:") and self.type[7:] in TOKEN_DTYPES

    @property
    def is_array(self) -> bool:
        match = _ARRAY.fullmatch(self.type)
        return match is not None and match.group(1) in NUMBER_TYPES

    @property
    def is_list(self) -> bool:
        """Stored as a list of numbers per sample: token ids, or an array (flattened)."""
        return self.is_tokens or self.is_array

    @property
    def shape(self) -> tuple[int, ...] | None:
        """A fixed-shape array's shape; None for every other type."""
        match = _ARRAY.fullmatch(self.type)
        if match is None or not match.group(2):
            return None
        return tuple(int(d) for d in match.group(2).split(","))

    @property
    def size(self) -> int | None:
        """Numbers in each sample's array, for a fixed-shape array (None otherwise)."""
        shape = self.shape
        return math.prod(shape) if shape is not None else None

    @property
    def is_payload(self) -> bool:
        """Payload columns are read zero-copy as numpy arrays (bytes as uint8)."""
        return self.type == "bytes" or self.is_list

    @property
    def numpy_dtype(self) -> np.dtype:
        if self.is_scalar:
            return NUMBER_TYPES[self.type]
        if self.is_tokens:
            return np.dtype(TOKEN_DTYPES[self.type[7:]])
        if self.is_array:
            return NUMBER_TYPES[self.type.split("[", 1)[0]]
        if self.type == "bytes":
            return np.dtype(np.uint8)
        raise DataError(f"column {self.name!r} of type {self.type!r} has no numpy dtype")

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "type": self.type}

    @classmethod
    def from_json(cls, obj: dict) -> Column:
        return cls(name=obj["name"], type=obj["type"])


def token_type_for_vocab(vocab_size: int) -> str:
    """The smallest unsigned column type that holds every id of a vocabulary."""
    for name, dtype in TOKEN_DTYPES.items():
        if vocab_size - 1 <= np.iinfo(dtype).max:
            return f"tokens:{name}"
    raise DataError(f"vocabulary of {vocab_size} ids does not fit in uint32")
