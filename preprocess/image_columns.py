"""Labels and extra columns of image inputs, from the values a source gives for each sample:
what the CSV/JSONL lists, WebDataset tars and Parquet files share, so that a column holds the
same type whichever of them it came from."""

from __future__ import annotations

from typing import Any

from datapipe.errors import ArgumentError

# The columns every image dataset has, and the keys dp.Loader adds to each batch beside them
# (a column of the same name would be handed out under a key the loader overwrites).
RESERVED_COLUMNS = {"image", "label", "height", "width", "path", "index", "is_padding"}
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def check_extra_names(src: object, names: list[str], what: str = "column name") -> None:
    """Extra columns may not take the name of a column every image dataset has."""
    clash = RESERVED_COLUMNS.intersection(names)
    if clash:
        raise ArgumentError(f"SRC {src}: {what} {sorted(clash)[0]!r} is reserved (the "
                            f"columns and batch keys {', '.join(sorted(RESERVED_COLUMNS))} "
                            "every image dataset has)")


def class_labels(raw: list[Any]) -> tuple[list[int | None], tuple[str, ...] | None]:
    """Integer labels are kept (None: beyond int64, a reject); names are mapped to their index
    in sorted order, which the manifest's `classes` then lists."""
    try:
        integers = [strict_int(v) for v in raw]  # 1.5 is a class name, never label 1
    except (TypeError, ValueError, OverflowError):  # OverflowError: JSON's Infinity
        classes = tuple(sorted({str(v) for v in raw}))
        index = {c: i for i, c in enumerate(classes)}
        return [index[str(v)] for v in raw], classes
    return [v if fits_int64(v) else None for v in integers], None


def sparse_labels(raw: list[Any], missing: str) -> tuple[list[Any], tuple[str, ...] | None]:
    """`class_labels` where some samples have none (None in `raw`): each of those gets
    `missing`, the reason it is rejected. When no sample has one, every label is -1."""
    given = [value for value in raw if value is not None]
    if not given:
        return [-1] * len(raw), None
    values, classes = class_labels(given)
    kept = iter(values)
    return [missing if value is None else next(kept) for value in raw], classes


def typed_column(values: list[Any]) -> tuple[str, list[Any]]:
    """Extras become int64 or float64 when every value parses as one, else strings. Integers
    beyond int64 stay strings: float64 would round their digits away."""
    try:
        integers = [strict_int(v) for v in values]
    except (TypeError, ValueError):
        integers = None
    if integers is not None:
        if all(map(fits_int64, integers)):
            return "int64", integers
        return "string", [str(v) for v in values]
    try:
        return "float64", [float(v) for v in values]
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond any float
        return "string", ["" if v is None else str(v) for v in values]


def fits_int64(value: int) -> bool:
    return INT64_MIN <= value <= INT64_MAX


def strict_int(value: Any) -> int:
    """int() that refuses to truncate: 0.5 and "0.5" are not integers."""
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(value)
    if isinstance(value, bool):
        raise TypeError(value)
    return int(value)
