"""Parquet files as a source of images, laid out as Hugging Face `datasets` writes them: an
image column (a struct of `bytes` and `path`, or plain binary), a label column, and other
columns. Each row is one input, named FILE#rowN (N counted from 0, as `dataset[i]` counts).

The process writing the shards reads only the files' footers and their label and scalar
columns; the workers read the images, a row group at a time (input_bytes.py). A file
without the columns asked for is refused, naming the columns it has, before any work starts.
"""

from __future__ import annotations

import json
from typing import Any

from datapipe.errors import ArgumentError, DataError
from preprocess.file_access import InputFile, describe_files, open_seekable
from preprocess.image_columns import check_extra_names, sparse_labels, typed_column
from preprocess.image_inputs import ImageItem, ImageSource, ParquetRow, SourceOptions, alternatives

IMAGE_FIELDS = ("image", "img")  # the Hub's ImageNet-1k, food101 ...; CIFAR
# The Hub's usual label columns; else a file's one ClassLabel column (CIFAR-100 has two).
LABEL_FIELDS = ("label", "labels")


def open_parquet(file: InputFile) -> Any:
    """The ParquetFile, or a one-line error naming the file."""
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(open_seekable(file))
    except DataError:
        raise
    except Exception as exc:  # pyarrow raises several types for a file that is not Parquet
        raise DataError(f"SRC {file.name}: unreadable Parquet ({exc})") from None


class _Layout:
    """One file's columns: which holds the image, which the label, which are extras."""

    def __init__(self, file: InputFile, schema: Any, options: SourceOptions) -> None:
        self.file, self.schema = file, schema
        self.image = self._pick(options.image_field, IMAGE_FIELDS, "image", required=True)
        self._check_image_type()
        self.features = hugging_face_features(schema)
        class_labels = [name for name, feature in self.features.items()
                        if isinstance(feature, dict) and feature.get("_type") == "ClassLabel"]
        defaults = LABEL_FIELDS + (tuple(class_labels) if len(class_labels) == 1 else ())
        self.label = self._pick(options.label_field, defaults, "label",
                                required=options.label_field is not None)
        self.caption = self._pick(options.caption_field, (), "caption", required=True) \
            if options.caption_field else None
        self.extras = [f.name for f in schema if f.name not in (self.image, self.label,
                                                                   self.caption)
                       and _is_scalar(f.type)]

    def _pick(self, given: str | None, default: tuple[str, ...], what: str,
              required: bool) -> str | None:
        names = default if given is None else alternatives(given)
        found = next((n for n in names if n in self.schema.names), None)
        if found is None and required:
            raise ArgumentError(
                f"SRC {self.file.name}: no {what} column {' or '.join(map(repr, names))}; its "
                f"columns are {', '.join(self.schema.names) or 'none'} (name the {what} column "
                f"with --{what}-field)")
        return found

    def _check_image_type(self) -> None:
        import pyarrow as pa

        declared = kind = self.schema.field(self.image).type
        if pa.types.is_struct(kind) and kind.get_field_index("bytes") >= 0:
            kind = kind.field("bytes").type
        if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
            raise ArgumentError(
                f"SRC {self.file.name}: column {self.image!r} holds {declared}, not encoded "
                "images (binary, or a struct of bytes and path as Hugging Face datasets "
                "writes it); name the image column with --image-field")


def _is_scalar(kind: Any) -> bool:
    import pyarrow as pa

    return (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
            or pa.types.is_string(kind) or pa.types.is_large_string(kind))


def list_parquet_images(files: tuple[InputFile, ...], options: SourceOptions,
                        root: str | None) -> ImageSource:
    parquets = [open_parquet(file) for file in files]
    layouts = [_Layout(f, p.schema_arrow, options) for f, p in zip(files, parquets, strict=True)]
    extra_names = list(dict.fromkeys(name for layout in layouts for name in layout.extras))
    check_extra_names(describe_files(files), extra_names)
    raw_labels: list[Any] = []
    extras: dict[str, list[Any]] = {name: [] for name in extra_names}
    captions: list[Any] = []
    for file, parquet, layout in zip(files, parquets, layouts, strict=True):
        _read_scalars(file, parquet, layout, raw_labels, extras, captions)
    labels, classes = sparse_labels(raw_labels, "the label is null")
    columns = {name: typed_column(values) for name, values in extras.items()}
    items = _items(files, parquets, labels, raw_labels, columns, captions)
    return ImageSource(items, classes or _class_names(layouts[0]),
                       tuple((name, kind) for name, (kind, _) in columns.items()), files, root,
                       tuple(layout.image for layout in layouts))


def _read_scalars(file: InputFile, parquet: Any, layout: _Layout, labels: list[Any],
                  extras: dict[str, list[Any]], captions: list[Any]) -> None:
    """Append the file's labels, extra columns and captions (a string, or a list of them per
    row), None where a file lacks the column."""
    rows = parquet.metadata.num_rows
    names = [n for n in (layout.label, layout.caption, *layout.extras) if n is not None]
    try:
        table = parquet.read(columns=names) if names else None
    except Exception as exc:  # a corrupt column chunk
        raise DataError(f"SRC {file.name}: unreadable Parquet ({exc})") from None
    labels.extend(table.column(layout.label).to_pylist() if layout.label else [-1] * rows)
    for name, values in extras.items():
        values.extend(table.column(name).to_pylist() if name in layout.extras else
                      [None] * rows)
    if layout.caption is not None:
        captions.extend(table.column(layout.caption).to_pylist())


def _items(files: tuple[InputFile, ...], parquets: list[Any], labels: list[Any],
           raw_labels: list[Any], columns: dict[str, tuple[str, list[Any]]],
           captions: list[Any]) -> tuple:
    items = []
    index = 0  # among all rows, which labels and extras are aligned with
    for number, (file, parquet) in enumerate(zip(files, parquets, strict=True)):
        row = 0
        for group in range(parquet.metadata.num_row_groups):
            for in_group in range(parquet.metadata.row_group(group).num_rows):
                label = labels[index]
                problem = None if isinstance(label, int) else \
                    label or f"label {raw_labels[index]} is beyond the int64 range"
                items.append(ImageItem(
                    None, f"{file.name}#row{row}", label if isinstance(label, int) else -1,
                    tuple(values[index] for _, values in columns.values()), problem,
                    ParquetRow(number, group, in_group),
                    captions[index] if captions else None))
                row += 1
                index += 1
    return tuple(items)


def hugging_face_features(schema: Any) -> dict[str, Any]:
    """The features `datasets` records in a file's metadata (column -> its type); {} when
    the file was written by something else."""
    try:
        features = json.loads((schema.metadata or {})[b"huggingface"])["info"]["features"]
    except (KeyError, TypeError, ValueError):
        return {}
    return features if isinstance(features, dict) else {}


def _class_names(layout: _Layout) -> tuple[str, ...] | None:
    """The names of the label column's ClassLabel, if it is one."""
    feature = layout.features.get(layout.label) if layout.label else None
    names = feature.get("names") if isinstance(feature, dict) else None
    return tuple(map(str, names)) if isinstance(names, list) else None
