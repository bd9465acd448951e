"""The schema a DatasetWriter is given: the column types a user declares, the shard columns
each one stores, and the check and conversion of every value written to it.

A value that does not fit its column is refused as it is written, never stored to be refused
by a reader later: an int out of its type's range, a finite number too large for its float
type (numpy would store it as inf), a float array for an integer column, an image whose header
PIL cannot read. The check runs on the writing process, once per sample.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.format.caption_writer import CAPTIONS_TYPE
from datapipe.format.captions import CAPTION_IDS, CAPTION_LENGTHS, caption_columns
from datapipe.format.schema import NUMBER_TYPES, TOKEN_DTYPES, Column

# Encoded image types, by the format PIL must find in their header (None: any it reads).
IMAGE_TYPES = {"jpeg": "JPEG", "png": "PNG", "image": None}
PIXELS = "pixels"  # raw RGB, a uint8 array of shape (height, width, 3)
IMAGE_COLUMNS = ("image", "label", "height", "width")  # as `datapipe convert images` orders them
ALIASES = {"str": "string", "int": "int64", "float": "float64"}
# Names a loader puts in its batches beside the columns, or the writer derives from another.
RESERVED = {
    "images": {"height", "width", "index", "is_padding", "input_ids", "attention_mask",
               "caption_index", CAPTION_IDS, CAPTION_LENGTHS},
    "text": {"length", "index", "is_padding", "input_ids", "labels", "position_ids",
             "cu_seqlens", "max_seqlen", "attention_mask", "num_real_tokens", "efficiency",
             # TokenLoader's loss count and optional fields (datapipe.text.fields); not
             # loss_mask: a supervised dataset's own column, which TokenLoader applies
             "num_loss_tokens", "shift_labels", "seq_idx", "segment_start", "cu_seq_lens_q",
             "cu_seq_lens_k", "max_length_q", "max_length_k", "cu_seq_q", "cu_seq_k", "max_q",
             "max_k", "use_cache"},
    "table": set(),
}
TYPES_HELP = ("jpeg, png, image, pixels, bytes, string, a number (int8 ... uint64, float16, "
              "float32, float64), an array such as float32[512], uint8[32,32,3] or uint16[], "
              "or captions (an image dataset's)")


class Mismatch(ValueError):
    """A value that does not fit its column; the writer names the sample and column."""


@dataclass(frozen=True)
class Field:
    """One declared column: its type as declared, and the shard columns it stores."""

    name: str
    declared: str
    columns: tuple[Column, ...]
    classes: int | None = None  # labels: how many classes there are (None: any int)
    # The first column's number type and shape, read from its type string once, not per value.
    dtype: np.dtype | None = field(init=False, repr=False)
    shape: tuple[int, ...] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        column = self.columns[0]
        numbers = (column.is_scalar or column.is_list) and self.declared != CAPTIONS_TYPE
        object.__setattr__(self, "dtype", column.numpy_dtype if numbers else None)
        object.__setattr__(self, "shape", column.shape)

    def store(self, value: Any) -> tuple[Any, ...]:
        """The cells of `self.columns` for `value`; Mismatch when it does not fit."""
        column = self.columns[0]
        if self.declared == CAPTIONS_TYPE:
            raise Mismatch("captions are stored by the writer's CaptionEncoder")
        if self.declared in IMAGE_TYPES:
            return _image_cells(value, IMAGE_TYPES[self.declared])
        if self.declared == PIXELS:
            return _pixel_cells(value)
        if self.dtype is None:
            return (_string(value),) if column.type == "string" else (_bytes(value),)
        if column.is_scalar:
            return (_number(value, self.dtype, self.classes),)
        array = _array(value, self.dtype, self.shape)
        return (array, len(array)) if column.is_tokens else (array,)


@dataclass(frozen=True)
class SampleSchema:
    """The declared fields in order, the dataset's kind, and its shard columns: the fields'
    columns and the derived ones, an image dataset's first four in the image converter's
    order (so the same samples make the same shard bytes). `order[j]` says which of a
    sample's cells, made field by field and then the derived ones, goes to shard column j."""

    fields: tuple[Field, ...]
    kind: str  # "images" (an image column), "text" (a tokens column) or "table"
    encoding: str | None  # an image dataset's: "jpeg", "png", "image" or "raw"
    derived: tuple[tuple[Column, Any], ...] = ()  # columns stored with one value throughout
    columns: tuple[Column, ...] = field(init=False)
    order: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        made = [c for f in self.fields for c in f.columns] + [c for c, _ in self.derived]
        first = IMAGE_COLUMNS if self.kind == "images" else ()
        order = sorted(range(len(made)), key=lambda j: (
            first.index(made[j].name) if made[j].name in first else len(first), j))
        object.__setattr__(self, "columns", tuple(made[j] for j in order))
        object.__setattr__(self, "order", tuple(order))

    @property
    def names(self) -> frozenset[str]:
        return frozenset(f.name for f in self.fields)


def parse_schema(columns: Mapping[str, str] | Sequence[tuple[str, str]],
                 classes: Sequence[str] | None = None,
                 caption_id_type: str = "uint32") -> SampleSchema:
    """A schema from `{"name": "type", ...}` (or (name, type) pairs); ArgumentError for a
    schema no dataset can have: an unknown type, a name twice or reserved, none at all."""
    pairs = list(columns.items()) if isinstance(columns, Mapping) else _pairs(columns)
    if not pairs:
        raise ArgumentError("columns: empty; declare at least one, e.g. {'image': 'jpeg', "
                            "'label': 'int64'}")
    names = [name for name, _ in pairs]
    for name in names:
        if not isinstance(name, str) or not name:
            raise ArgumentError(f"columns: column names are non-empty strings, got {name!r}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ArgumentError(f"columns: {twice[0]!r} is declared twice")
    types = {name: _canonical(name, kind) for name, kind in pairs}
    kind = _kind(types)
    reserved = sorted(RESERVED[kind] & set(names))
    if reserved:
        what = "an image dataset" if kind == "images" else f"a {kind} dataset"
        raise ArgumentError(f"columns: {reserved[0]!r} is a reserved name in {what} (reserved: "
                            f"{', '.join(sorted(RESERVED[kind]))}); rename it")
    if classes is not None and ("label" not in types or kind != "images"):
        raise ArgumentError("classes: only an image dataset with a 'label' column has classes")
    _check_captions(types, kind)
    fields = tuple(_field(name, declared, kind, classes, caption_id_type)
                   for name, declared in types.items())
    derived = ()
    if kind == "images" and "label" not in types:  # unlabelled, as the image converter says
        derived = ((Column("label", "int64"), -1),)
    return SampleSchema(fields, kind, _encoding(types) if kind == "images" else None, derived)


def _pairs(columns: Any) -> list[tuple[str, str]]:
    try:
        return [(name, kind) for name, kind in columns]
    except (TypeError, ValueError):
        raise ArgumentError("columns: give a dict of name -> type, e.g. {'image': 'jpeg', "
                            "'label': 'int64'}") from None


def _canonical(name: str, declared: object) -> str:
    """The type as stored in the manifest, from the way it was declared."""
    if not isinstance(declared, str):
        raise ArgumentError(f"column {name!r}: the type is a string ({TYPES_HELP}), got "
                            f"{declared!r}")
    text = ALIASES.get(declared.strip(), declared.replace(" ", ""))
    if text in IMAGE_TYPES or text in (PIXELS, CAPTIONS_TYPE):
        return text
    try:
        Column(name, text)
    except ValueError:
        raise ArgumentError(f"column {name!r}: unknown type {declared!r}; give {TYPES_HELP}") \
            from None
    return text


def _kind(types: dict[str, str]) -> str:
    images = [n for n, t in types.items() if t in IMAGE_TYPES or t == PIXELS]
    if len(images) > 1:
        raise ArgumentError(f"columns: {images[0]!r} and {images[1]!r} are both images; a "
                            "dataset has one (store others as bytes)")
    if images and images[0] != "image":
        raise ArgumentError(f"column {images[0]!r}: the image column is called 'image' "
                            "(dp.Loader reads it by that name)")
    if images:
        label = types.get("label")
        if label is not None and not (label in NUMBER_TYPES and label[0] in "iu"):
            raise ArgumentError(f"column 'label': an image dataset's labels are integers "
                                f"(int64, int32, ...), got {label!r}")
        return "images"
    return "text" if "tokens" in types else "table"


def _check_captions(types: dict[str, str], kind: str) -> None:
    declared = [name for name, kind_ in types.items() if kind_ == CAPTIONS_TYPE]
    if declared and kind != "images":
        raise ArgumentError(f"column {declared[0]!r}: captions belong to an image dataset "
                            "(declare an 'image' column)")
    if len(declared) > 1:
        raise ArgumentError(f"columns: {declared[0]!r} and {declared[1]!r} are both captions; "
                            "give one column a list of captions per sample instead")


def _encoding(types: dict[str, str]) -> str:
    declared = types["image"]
    return "raw" if declared == PIXELS else declared


def _field(name: str, declared: str, kind: str, classes: Sequence[str] | None,
           caption_id_type: str) -> Field:
    if declared == CAPTIONS_TYPE:
        return Field(name, declared, caption_columns(caption_id_type, keep_text=False))
    if declared in IMAGE_TYPES or declared == PIXELS:
        return Field(name, declared, (Column(name, "bytes"), Column("height", "int32"),
                                      Column("width", "int32")))
    if kind == "text" and name == "tokens":
        dtype = declared.removeprefix("tokens:").removesuffix("[]")
        if dtype not in TOKEN_DTYPES or not (declared.endswith("[]")
                                             or declared.startswith("tokens:")):
            raise ArgumentError(f"column 'tokens': token ids are uint8[], uint16[] or uint32[] "
                                f"(what dp.TokenLoader reads), got {declared!r}")
        return Field(name, declared, (Column(name, f"tokens:{dtype}"),
                                      Column("length", "int32")))
    column = Column(name, declared)
    if column.is_tokens:  # an id array outside a text dataset is an array like any other
        column = Column(name, f"{declared.removeprefix('tokens:')}[]")
    count = len(classes) if classes is not None and name == "label" else None
    return Field(name, declared, (column,), count)


def _image_cells(value: Any, image_format: str | None) -> tuple[bytes, int, int]:
    from PIL import Image, UnidentifiedImageError

    data = _bytes(value)
    formats = [image_format] if image_format else None
    what = f"a {image_format} image" if image_format else "an image PIL reads"
    try:
        with Image.open(io.BytesIO(data), formats=formats) as image:
            width, height = image.size
    except UnidentifiedImageError:
        raise Mismatch(f"not {what}: PIL does not recognise its header (it starts "
                       f"{data[:8]!r})") from None
    except (OSError, ValueError, SyntaxError) as exc:  # a header PIL recognises, damaged
        raise Mismatch(f"not {what} ({type(exc).__name__}: {exc})") from None
    if width < 1 or height < 1:
        raise Mismatch(f"the image header says {width}x{height} pixels")
    return data, height, width


def _pixel_cells(value: Any) -> tuple[bytes, int, int]:
    if not isinstance(value, np.ndarray) or value.dtype != np.uint8 or value.ndim != 3 \
            or value.shape[2] != 3 or not value.size:
        raise Mismatch(f"expected RGB pixels, a uint8 array of shape (height, width, 3), got "
                       f"{_describe(value)}")
    return value.tobytes(), value.shape[0], value.shape[1]  # a copy: the caller may reuse it


def _number(value: Any, dtype: np.dtype, classes: int | None) -> int | float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, np.integer) if dtype.kind in "iu" else (int, float, np.integer,
                                                                  np.floating)):
        raise Mismatch(f"expected {'an' if dtype.kind == 'i' else 'a'} {dtype} number, got "
                       f"{_describe(value)}")
    if dtype.kind == "f":
        return _float(value, dtype)
    number, limits = int(value), np.iinfo(dtype)
    if not limits.min <= number <= limits.max:
        raise Mismatch(f"{number} is out of the range of {dtype}")
    if classes is not None and not 0 <= number < classes:
        raise Mismatch(f"label {number} is not one of the {classes} classes (0 to "
                       f"{classes - 1})")
    return number


def _float(value: Any, dtype: np.dtype) -> float:
    """`value` as a float, if `dtype` stores it as given: inf and nan as such, a finite number
    only if it stays finite (numpy would store 1e40 in float32 as inf, with a bare warning
    naming no sample)."""
    try:
        number = float(value)
    except OverflowError:  # an int past float64's range
        raise Mismatch(f"{_describe(value)} is out of the range of {dtype}") from None
    if abs(number) < OVERFLOW_AT[dtype] or not _is_finite(value):
        return number
    raise Mismatch(f"{_shown(value)} is out of the range of {dtype}{_range_note(dtype)}")


def _is_finite(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) or bool(np.isfinite(value))


def _overflow_threshold(dtype: np.dtype) -> np.longdouble:
    """The smallest magnitude that a cast to the float `dtype` rounds to inf: its largest
    value plus half a unit in its last place (float16: 65520), in long double so that
    float64's is finite where long double is wider."""
    info = np.finfo(dtype)
    return np.longdouble(info.max) + np.longdouble(2.0) ** (info.maxexp - 2 - info.nmant)


_THRESHOLDS = {dtype: _overflow_threshold(dtype) for dtype in NUMBER_TYPES.values()
               if dtype.kind == "f"}
# For a value given as a Python float or int (float64's: inf).
OVERFLOW_AT = {dtype: float(limit) for dtype, limit in _THRESHOLDS.items()}
# For an array's sum of squares (float16's and float32's exact as Python floats).
_SQUARED = {dtype: float(limit * limit) if dtype.itemsize < 8 else limit * limit
            for dtype, limit in _THRESHOLDS.items()}


def _shown(value: Any) -> str:
    """A number too large for its column, as a message shows it (a long double past float64's
    range by its own digits)."""
    number = float(value)
    return f"{number:.7g}" if math.isfinite(number) else str(value)


def _range_note(dtype: np.dtype) -> str:
    return f" (at most ±{float(np.finfo(dtype).max):.7g}; it would be stored as inf)"


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise Mismatch(f"expected a str, got {_describe(value)}")
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise Mismatch(f"a str that is not valid Unicode ({exc.reason} at {exc.start})") \
            from None
    return value


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)  # a copy: the caller may reuse its buffer
    raise Mismatch(f"expected bytes, got {_describe(value)}")


def _array(value: Any, dtype: np.dtype, shape: tuple[int, ...] | None) -> np.ndarray:
    """`value` as a flat copy in the column's dtype, if it holds numbers of that kind (ints
    for an integer column, within its range) in the column's shape (any length: 1-D)."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:  # ragged nested lists
        raise Mismatch(f"not an array of numbers ({exc})") from None
    if array.size and (array.dtype.kind not in "iuf"
                       or (dtype.kind in "iu" and array.dtype.kind == "f")):
        raise Mismatch(f"holds {array.dtype} values; the column holds {dtype}")
    if shape is not None and array.shape != shape:
        raise Mismatch(f"has shape {array.shape}; the column holds {dtype} of shape {shape}")
    if shape is None and array.ndim != 1:
        raise Mismatch(f"has shape {array.shape}; the column holds 1-D {dtype} arrays")
    if array.size and dtype.kind in "iu" and not np.can_cast(array.dtype, dtype, "safe"):
        low, high, limits = array.min(), array.max(), np.iinfo(dtype)
        if low < limits.min or high > limits.max:
            raise Mismatch(f"holds {low if low < limits.min else high}, out of the range of "
                           f"{dtype}")
    if array.dtype != dtype and dtype.kind == "f" and _may_overflow(array.dtype, dtype) \
            and array.size:
        _check_float_range(array, dtype)
    return np.array(array, dtype=dtype, order="C").reshape(-1)  # a copy, as for pixels


def _may_overflow(given: np.dtype, column: np.dtype) -> bool:
    """Whether some finite value of `given` may be past the float `column`'s range (float64
    into float32, uint16 or int32 into float16): only then are the values looked at."""
    if given.kind == "f":
        return given.itemsize > column.itemsize
    return column.itemsize == 2 and given.itemsize >= 2


def _check_float_range(array: np.ndarray, dtype: np.dtype) -> None:
    """Mismatch naming the first finite value of `array` that `dtype` would store as inf."""
    limit = _THRESHOLDS[dtype]
    if array.dtype.kind != "f":
        over = (array >= limit) | (array <= -limit)
    elif np.vdot(array, array) < _SQUARED[dtype]:
        return  # one pass when all fit: the sum of squares bounds each square
    else:  # a value too large, or a nan or an inf (given as such: kept)
        over = np.isfinite(array) & (np.abs(array) >= limit)
    if over.any():
        value = array.reshape(-1)[np.argmax(over.reshape(-1))]
        raise Mismatch(f"holds {_shown(value)}, out of the range of {dtype}"
                       f"{_range_note(dtype)}")


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array of shape {value.shape}"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"
