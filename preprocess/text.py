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
from preprocess.text_sources import TextOptions, iter_documents, list_text_files
from preprocess.tokenizers import TextTokenizer, load_tokenizer

BATCH_DOCUMENTS = 1024


def _batches(documents: Iterator[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
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
        documents = iter_documents(files, text_options)
        index = output.resume_from
        tokens = 0
        eos = np.array([tokenizer.eos_id if append_eos else 0], dtype=column.numpy_dtype)
        for batch in _batches(itertools.islice(documents, index, None), BATCH_DOCUMENTS):
            encoded = tokenizer.encode_batch([text for _, text in batch])
            for (where, text), ids in zip(batch, encoded, strict=True):
                if not text.strip():
                    output.reject(index, where, "empty document")
                else:
                    ids = ids.astype(column.numpy_dtype, copy=False)
                    if append_eos:
                        ids = np.concatenate([ids, eos])
                    output.add(index, {"tokens": ids, "length": len(ids)})
                    tokens += len(ids)
                index += 1
            if progress is not None:
                progress(index, tokens)
        result = output.finish(index, settings, stats={}, tokenizer=tokenizer.identity())
    result.extra["tokens_this_run"] = tokens
    return result
