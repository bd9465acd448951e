"""Column types of a shard: a small vocabulary both shard formats understand."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from datapipe.errors import DataError

SCALAR_TYPES = {"int32": np.int32, "int64": np.int64, "float64": np.float64}
TOKEN_DTYPES = {"uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32}
OTHER_TYPES = ("bytes", "string")


@dataclass(frozen=True)
class Column:
    """One column: `bytes` (encoded image, raw pixels), `string`, a scalar (`int32`, `int64`,
    `float64`) or `tokens:<uint8|uint16|uint32>` (a variable-length id array per sample)."""

    name: str
    type: str

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise DataError(f"column name must be a non-empty string, got {self.name!r}")
        if not (self.is_scalar or self.is_tokens or self.type in OTHER_TYPES):
            raise DataError(f"column {self.name!r} has unknown type {self.type!r}")

    @property
    def is_scalar(self) -> bool:
        return self.type in SCALAR_TYPES

    @property
    def is_tokens(self) -> bool:
        return self.type.startswith("tokens:") and self.type[7:] in TOKEN_DTYPES

    @property
    def is_payload(self) -> bool:
        """Payload columns are read zero-copy as numpy arrays (bytes as uint8)."""
        return self.type == "bytes" or self.is_tokens

    @property
    def numpy_dtype(self) -> np.dtype:
        if self.is_scalar:
            return np.dtype(SCALAR_TYPES[self.type])
        if self.is_tokens:
            return np.dtype(TOKEN_DTYPES[self.type[7:]])
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
