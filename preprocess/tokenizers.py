"""Tokenizers for offline conversion: a Hugging Face `tokenizer.json`, or built-in bytes."""

from __future__ import annotations

import functools
import json
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.format.captions import BOS_CANDIDATES, EOS_CANDIDATES, PAD_CANDIDATES
from datapipe.format.hashing import hash_file
from preprocess.long_texts import TextIds, cut_problem, encode_texts

# EOS_CANDIDATES are tried in order when --append-eos is given and no --eos-token names one;
# the others find a caption's first and padding ids where the tokenizer saves none.


class TextTokenizer(ABC):
    vocab_size: int
    eos_id: int | None

    @abstractmethod
    def encode_batch(self, texts: list[str]) -> list[TextIds]:
        """Token ids of each text, no special tokens added; or, for a text too long to
        tokenize within bounded memory, why (see long_texts.py)."""

    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """What the manifest records, so a loader can check it reads with the right tokenizer."""

    @abstractmethod
    def encode_captions(self, texts: list[str]) -> list[np.ndarray]:
        """Token ids of each short text as the tokenizer itself makes them: with the special
        tokens its template adds (CLIP's start and end of text), nothing cut."""

    @abstractmethod
    def special_ids(self) -> dict[str, int | None]:
        """`bos_id`, `eos_id` and `pad_id` (None: it has none), for a loader padding captions."""


class ByteTokenizer(TextTokenizer):
    """UTF-8 bytes as ids 0..255; id 256 is end-of-sequence."""

    vocab_size = 257
    eos_id = 256

    def encode_batch(self, texts: list[str]) -> list[TextIds]:
        return [np.frombuffer(t.encode("utf-8"), dtype=np.uint8) for t in texts]

    def identity(self) -> dict[str, Any]:
        return {"kind": "bytes", "name": "bytes", "vocab_size": self.vocab_size,
                "eos_id": self.eos_id, "hash": "builtin:bytes-v1"}

    def encode_captions(self, texts: list[str]) -> list[np.ndarray]:
        return list(self.encode_batch(texts))  # bytes: no template, no long-text limit

    def special_ids(self) -> dict[str, int | None]:
        return {"bos_id": None, "eos_id": self.eos_id, "pad_id": None}


class HFTokenizer(TextTokenizer):
    def __init__(self, path: Path, eos_token: str | None = None) -> None:
        from tokenizers import Tokenizer

        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # the Rust side raises a plain Exception for bad files
            raise ArgumentError(f"--tokenizer {path}: not a tokenizer.json ({exc})") from None
        # A tokenizer.json saved for inference often truncates and pads to a fixed length;
        # offline conversion must keep every token of every document and add none. Its padding
        # id is what a loader pads captions with.
        padding = self._tok.padding
        self._saved_pad_id = padding.get("pad_id") if padding else None
        self._tok.no_truncation()
        self._tok.no_padding()
        self.path = path
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.eos_token = eos_token or next(
            (t for t in EOS_CANDIDATES if self._tok.token_to_id(t) is not None), None)
        self.eos_id = self._tok.token_to_id(self.eos_token) if self.eos_token else None
        if eos_token and self.eos_id is None:
            raise ArgumentError(f"--eos-token {eos_token!r} is not in {path}")
        self._encode = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)

    def encode_batch(self, texts: list[str]) -> list[TextIds]:
        return encode_texts(texts, self._encode_whole, self.path.name, self.vocab_size,
                            lambda: self._cut_problem)

    def _encode_whole(self, texts: list[str]) -> list[np.ndarray]:
        encodings = self._encode(texts, add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.uint32) for e in encodings]

    @functools.cached_property
    def _cut_problem(self) -> str | None:
        """Why long texts cannot be cut into pieces (see long_texts.py); None: they can. Told
        at the first long text, from the tokenizer as loaded."""
        return cut_problem(json.loads(self._tok.to_str()))

    def encode_captions(self, texts: list[str]) -> list[np.ndarray]:
        encodings = self._encode(texts, add_special_tokens=True)
        return [np.asarray(e.ids, dtype=np.uint32) for e in encodings]

    def special_ids(self) -> dict[str, int | None]:
        named = _special_tokens_map(self.path.parent)
        return {"bos_id": self._id_of(named.get("bos_token"), BOS_CANDIDATES),
                "eos_id": self.eos_id,
                "pad_id": self._saved_pad_id if self._saved_pad_id is not None else
                self._id_of(named.get("pad_token"), PAD_CANDIDATES)}

    def _id_of(self, token: str | None, candidates: tuple[str, ...]) -> int | None:
        """The id of the token saved beside the tokenizer, else of the first candidate it has."""
        for name in (token, *candidates) if token else candidates:
            found = self._tok.token_to_id(name)
            if found is not None:
                return found
        return None

    def identity(self) -> dict[str, Any]:
        return {"kind": "hf", "name": self.path.name, "vocab_size": self.vocab_size,
                "eos_id": self.eos_id, "eos_token": self.eos_token,
                "hash": hash_file(self.path)}


def _special_tokens_map(folder: Path) -> dict[str, str]:
    """The special tokens transformers saves beside a tokenizer.json (`special_tokens_map.json`,
    each a string or {"content": ...}); {} when there is none."""
    try:
        saved = json.loads((folder / "special_tokens_map.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(saved, dict):
        return {}
    named = {k: v.get("content") if isinstance(v, dict) else v for k, v in saved.items()}
    return {k: v for k, v in named.items() if isinstance(v, str)}


def load_tokenizer(spec: str, eos_token: str | None = None) -> TextTokenizer:
    if spec == "bytes":
        if eos_token:
            raise ArgumentError("--eos-token does not apply to the bytes tokenizer (EOS is 256)")
        return ByteTokenizer()
    path = Path(spec)
    if path.is_dir() and (path / "tokenizer.json").is_file():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise ArgumentError(f"--tokenizer {spec!r}: not 'bytes' nor a tokenizer.json file")
    return HFTokenizer(path, eos_token)
