"""Captions of images at conversion: which field holds them, what a caption may be, and their
token ids (datapipe/format/captions.py says how they are stored).

A source gives each image its caption field's raw value (`ImageItem.caption`): a string, a list
of strings (several captions, COCO's five), or something else. What cannot be a caption is the
sample's reject reason, never a silent drop: no caption at all, a field that is not text (a
number, a dict, a tar member that is binary or over 64 KB), or, under `--empty-caption reject`
(the default), a blank one; `--empty-caption keep` stores a blank caption as the tokenizer's
ids of "" (its special tokens alone).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.format.captions import caption_columns, fit_caption, id_type_for, pack_captions
from datapipe.format.schema import TOKEN_DTYPES, Column
from preprocess.tokenizers import TextTokenizer, load_tokenizer

EMPTY_POLICIES = ("reject", "keep")


class NotText:
    """A caption field present but not text: a binary member, or one too large to read."""

    def __init__(self, why: str) -> None:
        self.why = why


@dataclass(frozen=True)
class CaptionOptions:
    """`--caption-field` and its companions, as given."""

    tokenizer: str
    field: str | None = None  # None: the source's default (image_inputs.DEFAULT_CAPTION_FIELDS)
    max_tokens: int | None = None
    keep_text: bool = False
    empty: str = "reject"
    id_type: str | None = None

    def __post_init__(self) -> None:
        if self.field is not None and not self.field.strip():
            raise ArgumentError(f"--caption-field: give a field name, got {self.field!r}")
        if self.max_tokens is not None and self.max_tokens < 2:
            raise ArgumentError(f"--caption-max-tokens: at least 2 (a token and the end of "
                                f"text), got {self.max_tokens}")
        if self.empty not in EMPTY_POLICIES:
            raise ArgumentError(f"--empty-caption: one of {EMPTY_POLICIES}, got {self.empty!r}")

    def record(self) -> dict[str, Any]:
        return {"field": self.field, "max_tokens": self.max_tokens, "keep_text": self.keep_text,
                "empty": self.empty}


@dataclass(frozen=True)
class CaptionWork:
    """What a conversion worker needs to turn raw caption values into stored cells."""

    options: CaptionOptions
    tokenizer: TextTokenizer
    id_type: str

    @classmethod
    def load(cls, options: CaptionOptions) -> CaptionWork:
        tokenizer = load_tokenizer(options.tokenizer)
        return cls(options, tokenizer,
                   id_type_for(tokenizer.vocab_size, options.id_type, "--caption-id-type"))

    def reading(self, field: str | None) -> CaptionWork:
        """This work naming the caption field the source resolved."""
        return dataclasses.replace(self, options=dataclasses.replace(self.options, field=field))

    @property
    def columns(self) -> tuple[Column, ...]:
        return caption_columns(self.id_type, self.options.keep_text)

    def manifest_tokenizer(self) -> dict[str, Any]:
        return {**self.tokenizer.identity(), **self.tokenizer.special_ids()}

    def texts(self, raw: Any) -> list[str] | str:
        """A sample's captions, or why it has none (its reject reason)."""
        return caption_texts(raw, self.options.field, self.options.empty)

    def cells(self, captions: list[list[str]]) -> tuple[list[tuple[Any, ...]], int]:
        """Each sample's cells (ids, lengths[, texts]) and how many captions were cut to
        --caption-max-tokens. One call of the tokenizer for the whole list."""
        flat = [text for texts in captions for text in texts]
        encoded = iter(self.tokenizer.encode_captions(flat)) if flat else iter(())
        dtype, eos = np.dtype(TOKEN_DTYPES[self.id_type]), self.tokenizer.eos_id
        out, truncated = [], 0
        for texts in captions:
            fitted = [fit_caption(next(encoded), eos, self.options.max_tokens) for _ in texts]
            truncated += sum(cut for _, cut in fitted)
            cells: tuple[Any, ...] = pack_captions([ids for ids, _ in fitted], dtype)
            if self.options.keep_text:
                cells += (json.dumps(texts, ensure_ascii=False),)
            out.append(cells)
        return out, truncated


def caption_texts(raw: Any, field: str, empty: str) -> list[str] | str:
    """`raw` as a list of captions, or the reason it is not one."""
    if isinstance(raw, NotText):
        return f"caption {field} is not text ({raw.why})"
    if raw is None or raw == []:
        return _missing(field, empty, f"no caption: it has no {field}")
    texts = raw if isinstance(raw, list) else [raw]
    for text in texts:
        if not isinstance(text, str):
            return f"caption {field} is {_kind(text)}, not text"
    if empty == "reject" and any(not text.strip() for text in texts):
        return f"empty caption in {field} (--empty-caption keep stores it)"
    return [text.strip() for text in texts]  # a .txt file's last line end is no part of it


def _missing(field: str, empty: str, reason: str) -> list[str] | str:
    return [""] if empty == "keep" else reason


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"a number ({value!r})"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list in a list"
    return f"a {type(value).__name__}"
