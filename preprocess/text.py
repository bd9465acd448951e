"""`datapipe convert text`: documents -> shards of pre-tokenized id arrays with lengths."""

from __future__ import annotations

import bisect
import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.format.hashing import hash_bytes
from datapipe.format.schema import Column, token_type_for_vocab
from datapipe.format.shard_formats import open_shard
from datapipe.format.writer import SCALAR_NBYTES
from datapipe.system import available_cores
from preprocess.chat_template import ChatEncoder
from preprocess.engine import Engine, LocalEngine
from preprocess.output import ConversionResult, OutputDirectory, OutputOptions
from preprocess.sft_records import CHAT, PLAIN, detect_kind
from preprocess.sft_tokenize import Encoded, encode_records
from preprocess.text_sources import (
    BadDocument,
    Document,
    TextOptions,
    TextSpan,
    list_text_files,
    read_span,
)
from preprocess.text_spans import Cursor, SpanBook, plan_spans, span_size
from preprocess.tokenizers import HFTokenizer, TextTokenizer, load_tokenizer

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
    text: TextOptions = dataclasses.field(default_factory=TextOptions)
    chat: ChatEncoder | None = None  # chat records: their template


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
    mask: np.ndarray | None = None  # the kept documents' loss masks end to end, if stored


def tokenize_span(work: TokenWork, span: TextSpan) -> TokenBatch:
    """One engine task: read a span of a file, tokenize its documents."""
    read = read_span(work.files[span.file], span, work.text)
    batch = tokenize_batch(work, read.documents)
    batch.span, batch.numbers = span, read.numbers
    batch.saw_record, batch.lacks_field = read.saw_record, read.lacks_field
    return batch


def tokenize_batch(work: TokenWork, batch: list[Document]) -> TokenBatch:
    """Documents, tokenized `BATCH_DOCUMENTS` at a time."""
    encoded: list[Encoded] = []
    for at in range(0, len(batch), BATCH_DOCUMENTS):
        part = [document for _, document in batch[at:at + BATCH_DOCUMENTS]]
        if work.text.kind == PLAIN:
            encoded += _encode_texts(work.tokenizer, part)
        else:
            encoded += encode_records(work.tokenizer, work.chat, part, work.text.loss_mask)
    return _gather(work, batch, encoded)


def _encode_texts(tokenizer: TextTokenizer, documents: list[Any]) -> list[Encoded]:
    """Plain documents: a text, or a BadDocument (a reject); an empty text is a reject too,
    and so is one too long to tokenize (the tokenizer says why)."""
    encoded = tokenizer.encode_batch([d if isinstance(d, str) else "" for d in documents])
    return [d.reason if isinstance(d, BadDocument) else None if _blank(d)
            else ids if isinstance(ids, str) else (ids, None)
            for d, ids in zip(documents, encoded, strict=True)]


def _blank(text: str) -> bool:
    return not text or text.isspace()  # as `not text.strip()`, without copying a long text


def _gather(work: TokenWork, batch: list[Document], encoded: list[Encoded]) -> TokenBatch:
    """The kept documents end to end, with EOS if asked (which the loss counts)."""
    eos = np.array([work.eos_id], dtype=work.dtype) if work.eos_id is not None else None
    result = TokenBatch(np.empty(0, work.dtype), [], [], [], [], documents=len(batch))
    with_mask = work.text.loss_mask is not None
    row_itemsize = np.dtype(work.dtype).itemsize + with_mask
    pieces, masks = [], []
    for position, ((number, _), outcome) in enumerate(zip(batch, encoded, strict=True)):
        if not isinstance(outcome, tuple):
            result.rejects.append((position, number, outcome))
            continue
        ids, mask = outcome
        pieces.append(ids.astype(work.dtype, copy=False))
        masks.append(mask)
        if eos is not None:
            pieces.append(eos)
            masks.append(_ONE)
        result.kept.append(position)
        result.lengths.append(len(ids) + (eos is not None))
        result.sizes.append(result.lengths[-1] * row_itemsize + SCALAR_NBYTES)
    if pieces:  # one document's ids as they are: a long one's may be hundreds of MB
        result.ids = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
    if with_mask:
        result.mask = np.concatenate(masks) if masks else np.empty(0, np.uint8)
    return result


_ONE = np.ones(1, np.uint8)


def convert_text(sources: list[Path], options: OutputOptions, tokenizer_spec: str,
                 text_options: TextOptions, append_eos: bool = False,
                 eos_token: str | None = None, workers: int | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 engine: Engine | None = None,
                 chat_template: Path | None = None) -> ConversionResult:
    """Tokenize every document; `progress(documents, tokens)` is called after each batch.

    `engine` runs the tokenizing (default: `workers` local processes, all cores for None);
    the output is the same. Chat records are rendered with `chat_template` (a Jinja file),
    else the template saved beside the tokenizer."""
    engine = engine or LocalEngine(workers or available_cores())
    files = list_text_files(sources)
    text_options = _resolve_kind(files, text_options)
    tokenizer = load_tokenizer(tokenizer_spec, eos_token)
    if append_eos and tokenizer.eos_id is None:
        raise ArgumentError(f"--append-eos: tokenizer {tokenizer_spec!r} has no EOS token; "
                            "name one with --eos-token")
    chat = _chat_encoder(tokenizer, text_options, chat_template)
    column = Column("tokens", token_type_for_vocab(tokenizer.vocab_size))
    columns = (column, Column("length", "int32"))
    if text_options.loss_mask:
        columns += (Column("loss_mask", "uint8[]"),)
    settings = {"field": text_options.field, "doc_per_file": text_options.doc_per_file,
                "append_eos": append_eos, "shard_size": options.shard_size,
                **_sft_settings(text_options, chat)}
    output = OutputDirectory(options, "text", columns,
                             _fingerprint(files, tokenizer, settings, options.shard_format))
    with output:
        kept_tokens = _tokens_in_kept_shards(output)
        cursor = Cursor.from_json(output.resume_point)
        book = SpanBook(files, cursor, text_options.field)
        output.resume_point_at = book.cursor_at
        spans = plan_spans(files, text_options, span_size(files, engine.workers), cursor)
        work = TokenWork(tokenizer, column.numpy_dtype, tokenizer.eos_id if append_eos else None,
                         tuple(files), text_options, chat)
        batches = engine.map_ordered(tokenize_span, work, spans)
        index, tokens = _write_batches(output, book, cursor.input, batches, progress)
        result = output.finish(index, settings, stats={}, tokenizer=tokenizer.identity())
    result.extra["tokens_this_run"] = tokens
    result.extra["tokens"] = kept_tokens + tokens
    return result


def _tokens_in_kept_shards(output: OutputDirectory) -> int:
    """The tokens (EOS included) of the shards an interrupted run finished, which this one
    keeps: with this run's, the dataset's."""
    tokens = 0
    for shard in output.writer.shards[:output.resumed_shards]:
        reader = open_shard(output.out / shard.name, output.options.shard_format,
                            output.columns)
        try:
            tokens += int(reader.scalar("length").sum())
        finally:
            reader.close()
    return tokens


def _resolve_kind(files: list[Path], options: TextOptions) -> TextOptions:
    """`options` with the kind of text "auto" stands for, told by the files."""
    kind = detect_kind(files, options.kind, options.prompt_field, options.completion_field)
    return dataclasses.replace(options, kind=kind)


def _chat_encoder(tokenizer: TextTokenizer, options: TextOptions,
                  template: Path | None) -> ChatEncoder | None:
    if options.kind != CHAT:
        if template is not None:
            raise ArgumentError(f"--chat-template applies to chat JSONL only; SRC holds "
                                f"{options.kind} text")
        return None
    if not isinstance(tokenizer, HFTokenizer):
        raise ArgumentError("--tokenizer bytes has no chat template: chat JSONL needs a "
                            "Hugging Face tokenizer.json (with --chat-template FILE if no "
                            "template is saved beside it)")
    return ChatEncoder(tokenizer.path, template)


def _sft_settings(options: TextOptions, chat: ChatEncoder | None) -> dict[str, Any]:
    """What the manifest records of fine-tuning text (nothing for plain text, whose settings
    are as they always were)."""
    if options.kind == PLAIN:
        return {}
    settings = {"text_kind": options.kind, "loss_on": options.loss_on or options.loss_mask,
                "loss_mask": options.loss_mask}
    if chat is not None:
        settings["chat_template"] = chat.template_hash
    else:
        settings.update(prompt_field=options.prompt_field,
                        completion_field=options.completion_field)
    return settings


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
        bounds = list(zip(starts.tolist(), ends.tolist(), strict=True))
        rows = {"tokens": [batch.ids[s:e] for s, e in bounds], "length": batch.lengths}
        if batch.mask is not None:
            rows["loss_mask"] = [batch.mask[s:e] for s, e in bounds]
        output.add_rows([first + p for p in batch.kept], rows, batch.sizes)
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
    skipped = sum(batch.lengths[:kept])
    batch.ids = batch.ids[skipped:]
    if batch.mask is not None:
        batch.mask = batch.mask[skipped:]
    del batch.kept[:kept], batch.lengths[:kept], batch.sizes[:kept]
    batch.rejects = [r for r in batch.rejects if r[0] >= done]
