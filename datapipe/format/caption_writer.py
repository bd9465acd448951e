"""A DatasetWriter's captions column: each sample's caption (a string), or several (a list of
them), tokenized with your tokenizer as `datapipe convert images --tokenizer` does it — the
tokenizer's own special tokens, end of text appended where its template adds none, cut to
`caption_max_tokens` keeping it — or ids you made (a list of ints, or a list of such lists).

The tokenizer is a Hugging Face `tokenizers.Tokenizer` or a transformers tokenizer (anything
with `convert_tokens_to_ids` and `__call__`); the manifest records what the converter records
of it, so a Loader pads with its pad id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.format.captions import (
    BOS_CANDIDATES,
    EOS_CANDIDATES,
    PAD_CANDIDATES,
    fit_caption,
    id_type_for,
    pack_captions,
)
from datapipe.format.hashing import hash_bytes
from datapipe.format.schema import TOKEN_DTYPES

CAPTIONS_TYPE = "captions"


class Mismatch(ValueError):
    """A caption value that cannot be stored (sample_schema's Mismatch names it)."""


class CaptionEncoder:
    def __init__(self, tokenizer: Any | None, max_tokens: int | None = None) -> None:
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 2):
            raise ArgumentError(f"caption_max_tokens: at least 2, got {max_tokens!r}")
        self.max_tokens = max_tokens
        self._encode, self.identity = _adapt(tokenizer)
        vocab = self.identity.get("vocab_size")
        self.id_type = id_type_for(vocab, None, "tokenizer") if vocab else "uint32"
        self.dtype = np.dtype(TOKEN_DTYPES[self.id_type])
        self.captions = self.truncated = self.longest = 0
        self._pending = (0, 0, 0)

    def cells(self, value: Any) -> tuple[np.ndarray, np.ndarray]:
        """The sample's (ids, lengths) cells; Mismatch for a value that is no caption."""
        captions = [self._ids(one) for one in _captions_of(value)]
        eos = self.identity.get("eos_id")
        fitted = [fit_caption(ids, eos, self.max_tokens) for ids in captions]
        for ids, _ in fitted:
            if len(ids) and int(ids.max()) > np.iinfo(self.dtype).max:
                raise Mismatch(f"id {int(ids.max())} is beyond the vocabulary's {self.id_type}")
        self._pending = (len(fitted), sum(cut for _, cut in fitted),
                         max(len(ids) for ids, _ in fitted))
        return pack_captions([ids for ids, _ in fitted], self.dtype)

    def commit(self) -> None:
        """Count the last sample's captions: it was written."""
        count, cut, longest = self._pending
        self.captions, self.truncated = self.captions + count, self.truncated + cut
        self.longest = max(self.longest, longest)

    def _ids(self, caption: str | Sequence[int]) -> np.ndarray:
        if isinstance(caption, str):
            if self._encode is None:
                raise Mismatch("a caption as text needs DatasetWriter(tokenizer=...); or give "
                               "its ids")
            return np.asarray(self._encode(caption), dtype=np.int64)
        ids = np.asarray(caption)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu") or \
                (ids.size and int(ids.min()) < 0):
            raise Mismatch("a caption is a string, or a list of ids (ints >= 0)")
        return ids.astype(np.int64)

    def stats(self) -> dict[str, int]:
        return {"captions": self.captions, "truncated": self.truncated,
                "longest": self.longest}


def _captions_of(value: Any) -> list[Any]:
    """A sample's captions: one string or id list, or a list of them."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, np.ndarray):
        return [value] if value.ndim == 1 else list(value)
    if isinstance(value, Sequence) and value:
        first = value[0]
        if isinstance(first, str | Sequence | np.ndarray):
            return list(value)
        return [value]
    raise Mismatch(f"a caption is a string, a list of captions or of ids, got "
                   f"{type(value).__name__} {value!r:.40}")


def _adapt(tokenizer: Any) -> tuple[Any, dict[str, Any]]:
    """(text -> ids, the manifest's record of the tokenizer)."""
    if tokenizer is None:
        return None, {"kind": "ids", "name": None, "hash": None, "bos_id": None,
                      "eos_id": None, "pad_id": None}
    if hasattr(tokenizer, "get_vocab_size") and hasattr(tokenizer, "to_str"):
        return _from_tokenizers(tokenizer)
    if hasattr(tokenizer, "convert_tokens_to_ids") and callable(tokenizer):
        return _from_transformers(tokenizer)
    raise ArgumentError(f"tokenizer: a tokenizers.Tokenizer or a transformers tokenizer, got "
                        f"{type(tokenizer).__name__}")


def _from_tokenizers(tokenizer: Any) -> tuple[Any, dict[str, Any]]:
    from tokenizers import Tokenizer

    text = tokenizer.to_str()
    padding = tokenizer.padding
    own = Tokenizer.from_str(text)  # a copy that neither pads nor cuts
    own.no_padding()
    own.no_truncation()

    def named(candidates: tuple[str, ...]) -> int | None:
        return next((i for i in map(own.token_to_id, candidates) if i is not None), None)

    pad = padding.get("pad_id") if padding else named(PAD_CANDIDATES)
    return (lambda caption: own.encode(caption).ids), {
        "kind": "hf", "name": "tokenizers.Tokenizer", "hash": hash_bytes(text.encode()),
        "vocab_size": own.get_vocab_size(with_added_tokens=True),
        "bos_id": named(BOS_CANDIDATES), "eos_id": named(EOS_CANDIDATES), "pad_id": pad}


def _from_transformers(tokenizer: Any) -> tuple[Any, dict[str, Any]]:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    digest = hash_bytes(backend.to_str().encode()) if backend is not None else None
    return (lambda caption: tokenizer(caption, truncation=False)["input_ids"]), {
        "kind": "transformers", "name": getattr(tokenizer, "name_or_path", None) or None,
        "hash": digest, "vocab_size": len(tokenizer), "bos_id": tokenizer.bos_token_id,
        "eos_id": tokenizer.eos_token_id, "pad_id": tokenizer.pad_token_id}
