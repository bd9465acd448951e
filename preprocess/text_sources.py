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
            found = sorted(p for p in src.rglob("*") if p.suffix.lower() in TEXT_SUFFIXES)
            if not found:
                raise ArgumentError(f"SRC {src} holds no {'/'.join(TEXT_SUFFIXES)} files")
            files.extend(found)
        elif src.suffix.lower() in TEXT_SUFFIXES:
            files.append(src)
        else:
            raise ArgumentError(f"SRC {src}: not a {'/'.join(TEXT_SUFFIXES)} file")
    return files


def iter_documents(files: list[Path], options: TextOptions) -> Iterator[tuple[str, str]]:
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


def _jsonl(path: Path, field: str) -> Iterator[tuple[str, str]]:
    for number, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except ValueError:
            raise DataError(f"{where}: not valid JSON") from None
        if not isinstance(record, dict) or field not in record:
            raise DataError(f"{where}: no field {field!r} (choose one with --field)")
        if not isinstance(record[field], str):
            raise DataError(f"{where}: field {field!r} is not a string")
        yield where, record[field]


def _parquet(path: Path, field: str) -> Iterator[tuple[str, str]]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise DataError(f"{path}: unreadable Parquet ({exc})") from None
    if field not in parquet.schema_arrow.names:
        raise DataError(f"{path}: no column {field!r} (choose one with --field)")
    row = 0
    for batch in parquet.iter_batches(columns=[field], batch_size=4096):
        for text in batch.column(0).to_pylist():
            yield f"{path}#row{row}", text if text is not None else ""
            row += 1
