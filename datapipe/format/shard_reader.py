"""The one interface both shard readers implement: random access, payloads read zero-copy.
The formats and how to open a shard of each are in shard_formats.py."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np

from datapipe.errors import DataError
from datapipe.format.schema import Column


class ShardReader(ABC):
    """Random access to the rows of one memory-mapped shard file. A reader checks the
    shard's structure as it opens it; `check_index=False` leaves out the passes over every row
    of its index (the file passed them before: check_marks.py)."""

    def __init__(self, path: str | Path, columns: tuple[Column, ...],
                 first_sample: int = 0, where: str | None = None,
                 dataset: str | None = None, check_index: bool = True) -> None:
        self.path = Path(path)
        # What messages call the shard and its dataset: a remote shard's URL, not its cached
        # copy's path.
        self.where = where or str(self.path)
        self.dataset = dataset or str(self.path.parent)
        self.columns = {c.name: c for c in columns}
        self.num_rows = 0
        self.first_sample = first_sample  # global index of row 0, for error messages
        self.check_index = check_index

    def __len__(self) -> int:
        return self.num_rows

    @abstractmethod
    def scalar(self, name: str) -> np.ndarray:
        """The whole of a scalar column (labels, heights, lengths) as a numpy array."""

    @abstractmethod
    def payload(self, name: str, row: int) -> np.ndarray:
        """One sample's bytes (uint8) or token ids, zero-copy where the format allows."""

    @abstractmethod
    def value(self, name: str, row: int) -> Any:
        """One cell of any column as a Python value (strings, extras)."""

    def values(self, name: str, rows: list[int]) -> list[Any]:
        """`value` of each of `rows` (a format may read them in one go)."""
        return [self.value(name, row) for row in rows]

    def payload_lengths(self, name: str) -> np.ndarray | None:
        """Every row's payload length from the shard's index, where the format keeps one
        apart from the payloads (None: only reading the rows would tell)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional for subclasses
        """Release the file mapping."""

    def row(self, row: int) -> dict[str, Any]:
        return {name: self.cell(name, row) for name in self.columns}

    def cell(self, name: str, row: int) -> Any:
        """One cell as a reader wants it: a payload as a numpy array (zero-copy where the
        format allows; a fixed-shape array in its shape), any other column as `value` gives."""
        col = self._column(name)
        if not col.is_payload:
            return self.value(name, row)
        values = self.payload(name, row)
        if col.shape is None:
            return values
        if len(values) != col.size:
            raise self.corrupt(row, f"column {name!r} holds {len(values)} numbers, not "
                                    f"{col.size} (shape {col.shape})")
        return values.reshape(col.shape)

    def _column(self, name: str) -> Column:
        try:
            return self.columns[name]
        except KeyError:
            raise DataError(f"{self.where}: no column {name!r}") from None

    def corrupt(self, row: int, problem: str) -> DataError:
        """The error for a row whose stored bytes cannot be right: names the shard, the row and
        the sample, and what to run."""
        return DataError(f"{self.where} row {row} (sample {self.first_sample + row}): {problem} "
                         f"{verify_hint(self.dataset)}")

    def corrupt_shard(self, problem: str) -> DataError:
        return DataError(f"{self.where}: {problem} {verify_hint(self.dataset)}")

    def _check_row(self, row: int) -> None:
        if not 0 <= row < self.num_rows:
            raise DataError(f"{self.where}: row {row} out of range (shard has {self.num_rows})")


def verify_hint(dataset: str) -> str:
    """How every message about a shard that fails a check ends."""
    return f"(a corrupt shard? run `datapipe verify {dataset}`)"



def stored_type_problem(column: Column, stored: object, expected: object) -> str | None:
    """Why a column stored as `stored` cannot be read as the manifest's `column` (whose type
    is `expected` in the format's own terms): it would be misread as another type."""
    if stored == expected:
        return None
    return f"column {column.name!r} is stored as {stored}, the manifest says {column.type}"
