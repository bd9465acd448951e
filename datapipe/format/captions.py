"""Captions of an image dataset: the columns that hold them and what the manifest says of them.

A sample holds one caption or several (COCO has five an image), tokenized once at conversion.
They are stored as Arrow stores a list of lists, values and offsets, in two columns both shard
formats read without a copy: `caption_ids`, every caption's ids end to end in the smallest
unsigned type the vocabulary fits, and `caption_lengths`, the number of ids of each caption (so
its length is the number of captions). `captions`, on request, keeps the texts as a JSON list.

The manifest's `tokenizer` names the tokenizer (name, hash, vocabulary size) and its special
ids (`bos_id`, `eos_id`, `pad_id`): what a loader pads with and which id ends a caption cut to
a context length. Its `stats["captions"]` counts the captions, those truncated at conversion,
and the longest (in ids): the widest row a loader may have to hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.errors import ArgumentError, DataError
from datapipe.format.schema import TOKEN_DTYPES, Column

CAPTION_IDS = "caption_ids"
CAPTION_LENGTHS = "caption_lengths"
CAPTION_TEXTS = "captions"
CAPTION_COLUMNS = (CAPTION_IDS, CAPTION_LENGTHS, CAPTION_TEXTS)
ID_TYPES = tuple(TOKEN_DTYPES)  # uint8, uint16, uint32
LENGTH_TYPE = "int32[]"
# Special tokens found by name where a tokenizer does not say which is which.
EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<eos>", "<|eos|>", "[SEP]", "<|end_of_text|>")
BOS_CANDIDATES = ("<|startoftext|>", "<s>", "<bos>", "[CLS]", "<|begin_of_text|>")
PAD_CANDIDATES = ("<pad>", "[PAD]", "<|pad|>", "<|padding|>")


def id_type_for(vocab_size: int, chosen: str | None = None, option: str = "id type") -> str:
    """The column's element type: `chosen`, refused when the vocabulary does not fit it, else
    the smallest that holds every id."""
    fitting = [name for name in ID_TYPES if vocab_size - 1 <= np.iinfo(TOKEN_DTYPES[name]).max]
    if chosen is None:
        if not fitting:
            raise ArgumentError(f"{option}: a vocabulary of {vocab_size:,} ids does not fit in "
                                "uint32")
        return fitting[0]
    if chosen not in ID_TYPES:
        raise ArgumentError(f"{option} {chosen!r}: expected one of {', '.join(ID_TYPES)}")
    if chosen not in fitting:
        largest = np.iinfo(TOKEN_DTYPES[chosen]).max
        raise ArgumentError(f"{option} {chosen}: the tokenizer's vocabulary has {vocab_size:,} "
                            f"ids, beyond {chosen}'s largest id {largest:,}; use "
                            f"{fitting[0] if fitting else 'a smaller vocabulary'}")
    return chosen


def caption_columns(id_type: str, keep_text: bool) -> tuple[Column, ...]:
    columns = (Column(CAPTION_IDS, f"{id_type}[]"), Column(CAPTION_LENGTHS, LENGTH_TYPE))
    return columns + ((Column(CAPTION_TEXTS, "string"),) if keep_text else ())


def fit_caption(ids: np.ndarray, eos_id: int | None, max_tokens: int | None
                ) -> tuple[np.ndarray, bool]:
    """A caption's ids ending with `eos_id` (appended when the tokenizer's own template did not
    add it), cut to `max_tokens` keeping that last id, as a tokenizer's truncation keeps its
    special tokens; and whether it was cut."""
    ids = np.asarray(ids, dtype=np.int64)  # bytes come as uint8, and their end of text is 256
    if eos_id is not None and (len(ids) == 0 or int(ids[-1]) != eos_id):
        ids = np.append(ids, np.asarray(eos_id, dtype=ids.dtype))
    if max_tokens is None or len(ids) <= max_tokens:
        return ids, False
    if eos_id is None:
        return ids[:max_tokens], True
    return np.append(ids[:max_tokens - 1], ids[-1:]), True


def pack_captions(captions: Sequence[np.ndarray], dtype: np.dtype
                  ) -> tuple[np.ndarray, np.ndarray]:
    """One sample's captions as its two cells: the ids end to end, and each caption's length."""
    lengths = np.fromiter((len(c) for c in captions), dtype=np.int32, count=len(captions))
    ids = np.concatenate(captions).astype(dtype, copy=False) if len(captions) else \
        np.empty(0, dtype)
    return ids, lengths


@dataclass(frozen=True)
class CaptionInfo:
    """What a loader needs to know of a dataset's captions."""

    pad_id: int | None
    eos_id: int | None
    longest: int  # ids in the longest stored caption
    tokenizer_hash: str | None

    @classmethod
    def of(cls, manifest: Any) -> CaptionInfo | None:
        """The dataset's captions (None: it has none), checked to be complete."""
        if CAPTION_IDS not in manifest.column_names:
            return None
        if CAPTION_LENGTHS not in manifest.column_names:
            raise DataError(f"dataset has column {CAPTION_IDS!r} without {CAPTION_LENGTHS!r}")
        tokenizer = manifest.tokenizer or {}
        longest = (manifest.stats.get("captions") or {}).get("longest")
        if not isinstance(longest, int) or longest < 0:
            raise DataError("dataset has captions but its manifest gives no stats.captions."
                            "longest (the longest caption's ids)")
        return cls(_special(tokenizer, "pad_id"), _special(tokenizer, "eos_id"), longest,
                   tokenizer.get("hash"))


def _special(tokenizer: dict[str, Any], key: str) -> int | None:
    value = tokenizer.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
