"""`datapipe convert text`: documents -> shards of pre-tokenized id arrays with lengths."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.format.hashing import hash_bytes
from datapipe.format.schema import Column, token_type_for_vocab
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


def convert_text(sources: list[Path], options: OutputOptions, tokenizer_spec: str,
                 text_options: TextOptions, append_eos: bool = False,
                 eos_token: str | None = None, workers: int | None = None,
                 progress: Callable[[int, int], None] | None = None) -> ConversionResult:
    """Tokenize every document; `progress(documents, tokens)` is called after each batch."""
    if workers:
        # The Rust tokenizer sizes its thread pool from this on first use.
        os.environ["RAYON_NUM_THREADS"] = str(workers)
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
        eos = np.array([tokenizer.eos_id], dtype=column.numpy_dtype) if append_eos else None
        index, tokens = _write_documents(output, documents, tokenizer, column.numpy_dtype, eos,
                                         progress)
        result = output.finish(index, settings, stats={}, tokenizer=tokenizer.identity())
    result.extra["tokens_this_run"] = tokens
    return result


def _write_documents(output: OutputDirectory, documents: Iterator[Document],
                     tokenizer: TextTokenizer, dtype: np.dtype, eos: np.ndarray | None,
                     progress: Callable[[int, int], None] | None) -> tuple[int, int]:
    """Tokenize in batches into OUT; returns (inputs done, tokens written this run)."""
    index, tokens = output.resume_from, 0
    for batch in _batches(documents, BATCH_DOCUMENTS):
        texts = [text if isinstance(text, str) else "" for _, text in batch]
        for (where, text), ids in zip(batch, tokenizer.encode_batch(texts), strict=True):
            if isinstance(text, BadDocument):
                output.reject(index, where, text.reason)
            elif not text.strip():
                output.reject(index, where, "empty document")
            else:
                ids = ids.astype(dtype, copy=False)
                if eos is not None:
                    ids = np.concatenate([ids, eos])
                output.add(index, {"tokens": ids, "length": len(ids)})
                tokens += len(ids)
            index += 1
        if progress is not None:
            progress(index, tokens)
    return index, tokens
