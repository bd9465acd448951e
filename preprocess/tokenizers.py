"""Tokenizers for offline conversion: a Hugging Face `tokenizer.json`, or built-in bytes."""

from __future__ import annotations

import functools
import json
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.format.hashing import hash_file
from preprocess.long_texts import TextIds, cut_problem, encode_texts

# Tried in order when --append-eos is given and no --eos-token names one.
EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<eos>", "<|eos|>", "[SEP]", "<|end_of_text|>")


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


class ByteTokenizer(TextTokenizer):
    """UTF-8 bytes as ids 0..255; id 256 is end-of-sequence."""

    vocab_size = 257
    eos_id = 256

    def encode_batch(self, texts: list[str]) -> list[TextIds]:
        return [np.frombuffer(t.encode("utf-8"), dtype=np.uint8) for t in texts]

    def identity(self) -> dict[str, Any]:
        return {"kind": "bytes", "name": "bytes", "vocab_size": self.vocab_size,
                "eos_id": self.eos_id, "hash": "builtin:bytes-v1"}


class HFTokenizer(TextTokenizer):
    def __init__(self, path: Path, eos_token: str | None = None) -> None:
        from tokenizers import Tokenizer

        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # the Rust side raises a plain Exception for bad files
            raise ArgumentError(f"--tokenizer {path}: not a tokenizer.json ({exc})") from None
        # A tokenizer.json saved for inference often truncates and pads to a fixed length;
        # offline conversion must keep every token of every document and add none.
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

    def identity(self) -> dict[str, Any]:
        return {"kind": "hf", "name": self.path.name, "vocab_size": self.vocab_size,
                "eos_id": self.eos_id, "eos_token": self.eos_token,
                "hash": hash_file(self.path)}


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
