"""Documents from .txt (a line each, or a file each), .jsonl (one field, or supervised
fine-tuning records: see sft_records.py) and .parquet files.

A converter's worker reads its own span of a file (a byte range that starts and ends at line
boundaries, or a run of Parquet row groups): the process that writes the shards never parses
the inputs. Documents are numbered within their span; the writing process, which sees the
spans in order, turns those numbers into the file's line or row numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datapipe.errors import ArgumentError, DataError
from preprocess import sft_records
from preprocess.input_files import (
    is_datapipe_output,
    require_regular_file,
    split_jsonl_lines,
    split_lines,
    strip_bom,
)
from preprocess.sft_records import PLAIN, Chat, PromptCompletion, json_kind

TEXT_SUFFIXES = (".txt", ".jsonl", ".ndjson", ".parquet")


@dataclass(frozen=True)
class TextOptions:
    field: str = "text"
    doc_per_file: bool = False
    kind: str = PLAIN  # or "auto" (told by the files), "prompt-completion", "chat"
    prompt_field: str = "prompt"
    completion_field: str = "completion"
    loss_on: str | None = None  # None: the kind's default

    def __post_init__(self) -> None:
        if self.kind != "auto":
            sft_records.check_loss_on(self.kind, self.loss_on)

    @property
    def loss_mask(self) -> str | None:
        """What the stored loss_mask marks ("assistant", "completion"); None: no mask, every
        token counts (plain text, or --loss-on all)."""
        if self.kind == PLAIN:
            return None
        loss_on = self.loss_on or sft_records.DEFAULT_LOSS_ON[self.kind]
        return None if loss_on == "all" else loss_on


def list_text_files(sources: list[Path]) -> list[Path]:
    """Files in the order given; a directory contributes its text files in sorted order."""
    files: list[Path] = []
    for src in sources:
        if not src.exists():
            raise ArgumentError(f"SRC {src} does not exist")
        if src.is_dir():
            files.extend(_folder_files(src))
        elif src.suffix.lower() in TEXT_SUFFIXES:
            files.append(src)
        else:
            raise ArgumentError(f"SRC {src}: not a {'/'.join(TEXT_SUFFIXES)} file")
    for path in files:
        require_regular_file(path)
    return files


def _folder_files(src: Path) -> list[Path]:
    """The text files under `src`, in sorted order, but for those of a datapipe output (OUT
    inside SRC holds rejects.jsonl): shards and their lists are not inputs."""
    # A folder named like a text file is not one; rglob lists what it holds anyway.
    found = sorted(p for p in src.rglob("*")
                   if p.suffix.lower() in TEXT_SUFFIXES and not p.is_dir())
    outputs = {folder for folder in {p.parent for p in found} if is_datapipe_output(folder)}
    found = [p for p in found if p.parent not in outputs]
    if not found:
        raise ArgumentError(f"SRC {src} holds no {'/'.join(TEXT_SUFFIXES)} files")
    return found


def file_kind(path: Path, options: TextOptions) -> str:
    """How a file holds documents: "parquet", "jsonl", "file" (one) or "lines"."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return "parquet"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    return "file" if options.doc_per_file else "lines"


@dataclass(frozen=True)
class TextSpan:
    """One engine task: part of one file, read by the worker that tokenizes it."""

    file: int  # index in the run's list of files
    kind: str  # file_kind()
    start: int  # first byte (a line's first), or first row group (Parquet)
    stop: int  # byte or row group after the last


@dataclass(frozen=True)
class BadDocument:
    """A record that holds no text (bad JSON, a null, a number): a reject with this reason,
    which the writing process prefixes with the file's name and the line or row."""

    reason: str


# (line or row within the span, from 0; its text, or its record for fine-tuning)
Document = tuple[int, "str | Chat | PromptCompletion | BadDocument"]


@dataclass
class SpanDocuments:
    documents: list[Document]
    numbers: int  # lines (or rows) the span holds, blank lines included
    saw_record: bool = False  # JSONL: the span holds a JSON object
    lacks_field: int | None = None  # JSONL: the span's first object, when it lacks the field


def read_span(path: Path, span: TextSpan, options: TextOptions) -> SpanDocuments:
    """The documents of `span` of the file at `path`."""
    if span.kind == "parquet":
        return _parquet_rows(path, span, options.field)
    text = _read_text(path, span.start, span.stop)
    if span.kind == "file":
        # As text-mode reading gives it, which a document per file always had.
        return SpanDocuments([(0, text.replace("\r\n", "\n").replace("\r", "\n"))], 1)
    lines = split_lines(text) if span.kind == "lines" else split_jsonl_lines(text)
    del text  # a long line is then held once, not twice, while its record is parsed
    if span.kind == "lines":
        return SpanDocuments(list(enumerate(lines)), len(lines))
    return _jsonl(lines, options)


def _read_text(path: Path, start: int, stop: int) -> str:
    """Bytes `start`..`stop` of the file as text; at its start, without the byte-order mark
    some editors write (it would be part of the first document, or make its JSON invalid)."""
    try:
        with open(path, "rb") as file:
            file.seek(start)
            text = file.read(stop - start).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {start + exc.start})") \
            from None
    except OSError as exc:
        raise DataError(f"{path}: unreadable ({exc.strerror or exc})") from None
    return strip_bom(text) if start == 0 else text


def _jsonl(lines: list[str], options: TextOptions) -> SpanDocuments:
    """A bad line is a reject; whether a first object without the field means the wrong
    --field is for the writing process to say, which knows the spans before this one (a
    fine-tuning file's first object was checked before the run began)."""
    result = SpanDocuments([], len(lines))
    for number in range(len(lines)):
        line, lines[number] = lines[number], ""  # freed once parsed: a line may be 200 MB
        if not line or line.isspace():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            result.documents.append((number, BadDocument(f"not valid JSON ({exc.msg})")))
            continue
        if isinstance(record, dict) and not result.saw_record:
            result.saw_record = True
            if options.kind == PLAIN and options.field not in record:
                result.lacks_field = number
        result.documents.append((number, _document(record, options)))
    return result


def _document(record: object, options: TextOptions) -> str | Chat | PromptCompletion | \
        BadDocument:
    if options.kind == PLAIN:
        return _text_field(record, options.field)
    if not isinstance(record, dict):
        return BadDocument(f"not a JSON object but {json_kind(record)}")
    if options.kind == sft_records.CHAT:
        document = sft_records.chat_record(record, options.loss_mask == "assistant")
    else:
        document = sft_records.prompt_completion_record(record, options.prompt_field,
                                                        options.completion_field)
    return BadDocument(document) if isinstance(document, str) else document


def _text_field(record: object, text_field: str) -> str | BadDocument:
    if not isinstance(record, dict):
        return BadDocument(f"not a JSON object but {json_kind(record)}")
    if text_field not in record:
        return BadDocument(f"no field {text_field!r}")
    text = record[text_field]
    if isinstance(text, str):
        return text
    return BadDocument(f"field {text_field!r} is {json_kind(text)}, not a string")


def open_parquet(path: Path, text_field: str) -> Any:
    """The ParquetFile at `path`, checked to hold a text column `text_field`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise DataError(f"{path}: unreadable Parquet ({exc})") from None
    if text_field not in parquet.schema_arrow.names:
        raise DataError(f"{path}: no column {text_field!r} (choose one with --field)")
    kind = parquet.schema_arrow.field(text_field).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise DataError(f"{path}: column {text_field!r} holds {kind}, not text "
                        "(choose the text column with --field)")
    return parquet


def _parquet_rows(path: Path, span: TextSpan, text_field: str) -> SpanDocuments:
    parquet = open_parquet(path, text_field)
    try:
        table = parquet.read_row_groups(list(range(span.start, span.stop)),
                                        columns=[text_field])
    except Exception as exc:  # a corrupt row group
        raise DataError(f"{path}: unreadable Parquet ({exc})") from None
    texts = table.column(0).to_pylist()
    documents = [(row, BadDocument("null text") if text is None else text)
                 for row, text in enumerate(texts)]
    return SpanDocuments(documents, len(texts))
