"""`datapipe convert text`: documents -> shards of pre-tokenized id arrays with lengths."""

from __future__ import annotations

import itertools
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
    iter_documents,
    list_text_files,
)
from preprocess.tokenizers import TextTokenizer, load_tokenizer

BATCH_DOCUMENTS = 1024


def _batches(documents: Iterator[Document], size: int) -> Iterator[list[Document]]:
    while batch := list(itertools.islice(documents, size)):
        yield batch


def _fingerprint(files: list[Path], tokenizer: TextTokenizer, settings: dict,
                 shard_format: str) -> str:
    inputs = [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    return hash_bytes(json.dumps({"kind": "text", "format": shard_format, "inputs": inputs,
                                  "tokenizer": tokenizer.identity(), "settings": settings})
                      .encode())


@dataclass(frozen=True)
class TokenWork:
    """What every worker holds for the whole run."""

    tokenizer: TextTokenizer
    dtype: np.dtype
    eos_id: int | None


@dataclass
class TokenBatch:
    """One batch's documents, tokenized: the kept ones' ids end to end, and the rejects."""

    ids: np.ndarray
    lengths: list[int]
    sizes: list[int]  # each kept document's rows_nbytes: its ids and its length
    kept: list[int]  # positions in the batch
    rejects: list[tuple[int, str, str]]  # (position, where, reason)


def tokenize_batch(work: TokenWork, batch: list[Document]) -> TokenBatch:
    """One engine task: a batch of documents, tokenized."""
    texts = [text if isinstance(text, str) else "" for _, text in batch]
    eos = np.array([work.eos_id], dtype=work.dtype) if work.eos_id is not None else None
    result = TokenBatch(np.empty(0, work.dtype), [], [], [], [])
    itemsize = np.dtype(work.dtype).itemsize
    pieces = []
    encoded = work.tokenizer.encode_batch(texts)
    for position, ((where, text), ids) in enumerate(zip(batch, encoded, strict=True)):
        if isinstance(text, BadDocument):
            result.rejects.append((position, where, text.reason))
        elif not text.strip():
            result.rejects.append((position, where, "empty document"))
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
        documents = itertools.islice(iter_documents(files, text_options), output.resume_from,
                                     None)
        work = TokenWork(tokenizer, column.numpy_dtype, tokenizer.eos_id if append_eos else None)
        batches = engine.map_ordered(tokenize_batch, work, _batches(documents, BATCH_DOCUMENTS))
        index, tokens = _write_batches(output, batches, progress)
        result = output.finish(index, settings, stats={}, tokenizer=tokenizer.identity())
    result.extra["tokens_this_run"] = tokens
    return result


def _write_batches(output: OutputDirectory, batches: Iterator[TokenBatch],
                   progress: Callable[[int, int], None] | None) -> tuple[int, int]:
    """Tokenized batches into OUT, in order; returns (inputs done, tokens written this run)."""
    index, tokens = output.resume_from, 0
    for batch in batches:
        for position, where, reason in batch.rejects:
            output.reject(index + position, where, reason)
        ends = np.cumsum(batch.lengths)
        documents = np.split(batch.ids, ends[:-1]) if batch.kept else []
        output.add_rows([index + p for p in batch.kept],
                        {"tokens": documents, "length": batch.lengths}, batch.sizes)
        index += len(batch.kept) + len(batch.rejects)
        tokens += int(ends[-1]) if batch.kept else 0
        if progress is not None:
            progress(index, tokens)
    return index, tokens
