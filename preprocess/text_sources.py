"""Documents from .txt (a line each, or a file each), .jsonl (one field) and .parquet files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from datapipe.errors import ArgumentError, DataError

TEXT_SUFFIXES = (".txt", ".jsonl", ".ndjson", ".parquet")


@dataclass(frozen=True)
class TextOptions:
    field: str = "text"
    doc_per_file: bool = False


def list_text_files(sources: list[Path]) -> list[Path]:
    """Files in the order given; a directory contributes its text files in sorted order."""
    files: list[Path] = []
    for src in sources:
        if not src.exists():
            raise ArgumentError(f"SRC {src} does not exist")
        if src.is_dir():
            # A folder named like a text file is not one; rglob lists what it holds anyway.
            found = sorted(p for p in src.rglob("*")
                           if p.suffix.lower() in TEXT_SUFFIXES and not p.is_dir())
            if not found:
                raise ArgumentError(f"SRC {src} holds no {'/'.join(TEXT_SUFFIXES)} files")
            files.extend(found)
        elif src.suffix.lower() in TEXT_SUFFIXES:
            files.append(src)
        else:
            raise ArgumentError(f"SRC {src}: not a {'/'.join(TEXT_SUFFIXES)} file")
    for path in files:
        if not path.is_file():  # a dangling link, or a FIFO that reading would block on
            raise DataError(f"{path}: not a regular file (or a link to none)")
    return files


@dataclass(frozen=True)
class BadDocument:
    """A record that holds no text (bad JSON, a null, a number): a reject with this reason."""

    reason: str


Document = tuple[str, str | BadDocument]  # (where: file and line or row, text)


def iter_documents(files: list[Path], options: TextOptions) -> Iterator[Document]:
    """Yield (where, text) for every document, `where` naming file and line or row."""
    for path in files:
        suffix = path.suffix.lower()
        if suffix == ".parquet":
            yield from _parquet(path, options.field)
        elif suffix in (".jsonl", ".ndjson"):
            yield from _jsonl(path, options.field)
        elif options.doc_per_file:
            yield str(path), _read_text(path)
        else:
            for number, line in enumerate(_read_text(path).splitlines(), 1):
                yield f"{path}:{number}", line


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise DataError(f"{path}: unreadable ({exc.strerror or exc})") from None


def _jsonl(path: Path, field: str) -> Iterator[Document]:
    """A bad line is a reject; a first record without the field means the wrong --field."""
    seen_record = False
    for number, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except ValueError as exc:
            yield where, BadDocument(f"{path.name} line {number}: not valid JSON ({exc.msg})")
            continue
        if isinstance(record, dict) and field not in record and not seen_record:
            raise DataError(f"{where}: no field {field!r} (choose one with --field)")
        seen_record = seen_record or isinstance(record, dict)
        yield where, _text_field(record, field, f"{path.name} line {number}")


def _text_field(record: object, field: str, where: str) -> str | BadDocument:
    if not isinstance(record, dict):
        return BadDocument(f"{where}: not a JSON object but {_json_kind(record)}")
    if field not in record:
        return BadDocument(f"{where}: no field {field!r}")
    text = record[field]
    if isinstance(text, str):
        return text
    return BadDocument(f"{where}: field {field!r} is {_json_kind(text)}, not a string")


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    kinds = ((bool, "a boolean"), ((int, float), "a number"), (list, "an array"),
             (dict, "an object"))
    return next((name for kind, name in kinds if isinstance(value, kind)), type(value).__name__)


def _parquet(path: Path, field: str) -> Iterator[Document]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise DataError(f"{path}: unreadable Parquet ({exc})") from None
    if field not in parquet.schema_arrow.names:
        raise DataError(f"{path}: no column {field!r} (choose one with --field)")
    kind = parquet.schema_arrow.field(field).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise DataError(f"{path}: column {field!r} holds {kind}, not text "
                        "(choose the text column with --field)")
    row = 0
    for batch in parquet.iter_batches(columns=[field], batch_size=4096):
        for text in batch.column(0).to_pylist():
            if text is None:
                text = BadDocument(f"{path.name} row {row}: null text")
            yield f"{path}#row{row}", text
            row += 1
