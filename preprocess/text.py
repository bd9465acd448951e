"""`datapipe convert text`: documents -> shards of pre-tokenized id arrays with lengths."""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.format.hashing import hash_bytes
from datapipe.format.schema import Column, token_type_for_vocab
from datapipe.format.writer import SCALAR_NBYTES
from datapipe.system import available_cores
from preprocess.engine import Engine, LocalEngine
from preprocess.output import ConversionResult, OutputDirectory, OutputOptions
from preprocess.text_sources import (
    BadDocument,
    Document,
    TextOptions,
    TextSpan,
    list_text_files,
    read_span,
)
from preprocess.text_spans import Cursor, SpanBook, plan_spans, span_size
from preprocess.tokenizers import TextTokenizer, load_tokenizer

BATCH_DOCUMENTS = 1024  # per call of the tokenizer: bounds its transient memory


def _fingerprint(files: list[Path], tokenizer: TextTokenizer, settings: dict,
                 shard_format: str) -> str:
    # Resolved: `big.jsonl` and `/abs/big.jsonl` are the same input, whichever a rerun names.
    inputs = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    return hash_bytes(json.dumps({"kind": "text", "format": shard_format, "inputs": inputs,
                                  "tokenizer": tokenizer.identity(), "settings": settings})
                      .encode())


@dataclass(frozen=True)
class TokenWork:
    """What every worker holds for the whole run."""

    tokenizer: TextTokenizer
    dtype: np.dtype
    eos_id: int | None
    files: tuple[Path, ...] = ()
    text_field: str = "text"


@dataclass
class TokenBatch:
    """Documents, tokenized: the kept ones' ids end to end, and the rejects. From a span, it
    also says what the writing process needs to number them in their file."""

    ids: np.ndarray
    lengths: list[int]
    sizes: list[int]  # each kept document's rows_nbytes: its ids and its length
    kept: list[int]  # positions among the documents
    rejects: list[tuple[int, int, str | None]]  # (position, number, reason; None: empty)
    documents: int = 0
    span: TextSpan | None = None
    numbers: int = 0  # lines or rows the span holds
    saw_record: bool = False
    lacks_field: int | None = None


def tokenize_span(work: TokenWork, span: TextSpan) -> TokenBatch:
    """One engine task: read a span of a file, tokenize its documents."""
    read = read_span(work.files[span.file], span, work.text_field)
    batch = tokenize_batch(work, read.documents)
    batch.span, batch.numbers = span, read.numbers
    batch.saw_record, batch.lacks_field = read.saw_record, read.lacks_field
    return batch


def tokenize_batch(work: TokenWork, batch: list[Document]) -> TokenBatch:
    """Documents, tokenized `BATCH_DOCUMENTS` at a time."""
    texts = [text if isinstance(text, str) else "" for _, text in batch]
    eos = np.array([work.eos_id], dtype=work.dtype) if work.eos_id is not None else None
    result = TokenBatch(np.empty(0, work.dtype), [], [], [], [], documents=len(batch))
    itemsize = np.dtype(work.dtype).itemsize
    pieces = []
    encoded = [ids for at in range(0, len(texts), BATCH_DOCUMENTS)
               for ids in work.tokenizer.encode_batch(texts[at:at + BATCH_DOCUMENTS])]
    for position, ((number, text), ids) in enumerate(zip(batch, encoded, strict=True)):
        if isinstance(text, BadDocument):
            result.rejects.append((position, number, text.reason))
        elif not text.strip():
            result.rejects.append((position, number, None))
        else:
            pieces.append(ids.astype(work.dtype, copy=False))
            if eos is not None:
                pieces.append(eos)
            result.kept.append(position)
            result.lengths.append(len(ids) + (eos is not None))
            result.sizes.append(result.lengths[-1] * itemsize + SCALAR_NBYTES)
    if pieces:
        result.ids = np.concatenate(pieces)
    return result


def convert_text(sources: list[Path], options: OutputOptions, tokenizer_spec: str,
                 text_options: TextOptions, append_eos: bool = False,
                 eos_token: str | None = None, workers: int | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 engine: Engine | None = None) -> ConversionResult:
    """Tokenize every document; `progress(documents, tokens)` is called after each batch.

    `engine` runs the tokenizing (default: `workers` local processes, all cores for None);
    the output is the same."""
    engine = engine or LocalEngine(workers or available_cores())
    files = list_text_files(sources)
    tokenizer = load_tokenizer(tokenizer_spec, eos_token)
    if append_eos and tokenizer.eos_id is None:
        raise ArgumentError(f"--append-eos: tokenizer {tokenizer_spec!r} has no EOS token; "
                            "name one with --eos-token")
    column = Column("tokens", token_type_for_vocab(tokenizer.vocab_size))
    settings = {"field": text_options.field, "doc_per_file": text_options.doc_per_file,
                "append_eos": append_eos, "shard_size": options.shard_size}
    output = OutputDirectory(options, "text", (column, Column("length", "int32")),
                             _fingerprint(files, tokenizer, settings, options.shard_format))
    with output:
        cursor = Cursor.from_json(output.resume_point)
        book = SpanBook(files, cursor, text_options.field)
        output.resume_point_at = book.cursor_at
        spans = plan_spans(files, text_options, span_size(files, engine.workers), cursor)
        work = TokenWork(tokenizer, column.numpy_dtype, tokenizer.eos_id if append_eos else None,
                         tuple(files), text_options.field)
        batches = engine.map_ordered(tokenize_span, work, spans)
        index, tokens = _write_batches(output, book, cursor.input, batches, progress)
        result = output.finish(index, settings, stats={}, tokenizer=tokenizer.identity())
    result.extra["tokens_this_run"] = tokens
    return result


def _write_batches(output: OutputDirectory, book: SpanBook, first: int,
                   batches: Iterator[TokenBatch],
                   progress: Callable[[int, int], None] | None) -> tuple[int, int]:
    """Tokenized spans into OUT, in order, the first `first` inputs being before them and the
    ones before `output.resume_from` already in OUT; returns (inputs done, tokens written)."""
    tokens = 0
    for batch in batches:
        base = book.begin(batch.span, first, batch.numbers, batch.saw_record,
                          batch.lacks_field)
        _drop_done(batch, output.resume_from - first)
        for position, number, reason in batch.rejects:
            output.reject(first + position, *book.describe(batch.span, base + number, reason))
        ends = np.cumsum(batch.lengths)
        # Plain slices: np.split costs several times more per document, on the writing thread.
        starts = ends - batch.lengths
        documents = [batch.ids[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
        output.add_rows([first + p for p in batch.kept],
                        {"tokens": documents, "length": batch.lengths}, batch.sizes)
        first += batch.documents
        tokens += int(ends[-1]) if batch.kept else 0
        if progress is not None:
            progress(first, tokens)
    return first, tokens


def _drop_done(batch: TokenBatch, done: int) -> None:
    """Leave out the batch's first `done` documents: a resumed run has them in OUT."""
    if done <= 0:
        return
    kept = bisect.bisect_left(batch.kept, done)
    batch.ids = batch.ids[sum(batch.lengths[:kept]):]
    del batch.kept[:kept], batch.lengths[:kept], batch.sizes[:kept]
    batch.rejects = [r for r in batch.rejects if r[0] >= done]
