"""Long documents tokenized in bounded pieces, to the very ids of the whole.

A Hugging Face tokenizer holds about 100 bytes per character of the text it encodes (its
normalized copy with alignments, the pre-tokens, the encoding's tokens and offsets): a 200 MB
document would take 20 GB. A document over LONG_TEXT_CHARS is cut into pieces of about
PIECE_CHARS, each encoded alone, and their ids are joined. A cut is made only where the ids
provably stay those of the whole: before a space (U+0020) that follows a letter or digit, in a
tokenizer whose
- normalizers map each character alone (Unicode's forms reorder only combining marks, which a
  space ends) and keep whitespace whitespace (BertNormalizer, Lowercase, NFC, NFD, NFKC, NFKD,
  StripAccents, Nmt, a Replace of whitespace by whitespace), so the normalized pieces join
  into the normalized whole;
- pre-tokenizer splits there before anything rewrites the space: at whitespace
  (BertPreTokenizer, Whitespace, WhitespaceSplit, CharDelimiterSplit on ' ', Metaspace with
  split), or by the regex of GPT-2 (ByteLevel), Llama 3 (cl100k), Qwen 2 or o200k (Split), none
  of which puts a letter or digit and the space after it in one pre-token, nor looks behind;
  what acts before the split keeps to each character or run (Digits, Punctuation, ByteLevel
  without its regex, Metaspace without split), what acts after it, to each pre-token;
- added tokens hold no whitespace among other characters, and none that ends in a letter or
  digit (or is matched after normalizing) takes the whitespace after it (rstrip).
The model (WordPiece, BPE, Unigram, WordLevel) encodes each pre-token alone, so its ids join.
tests/preprocess/test_long_texts.py checks each of these against the ids of the whole text.

A tokenizer that cannot be cut so (no pre-tokenizer, as the SentencePiece BPE of Llama 2 or
Gemma; Metaspace without split; a Split regex not listed; a Prepend or Strip normalizer; the
Precompiled normalizer of SentencePiece conversions, which maps graphemes) is given a document
whole up to MAX_PIECE_CHARS; a longer one is a reject that says its size and why, as is a
document that has more than MAX_PIECE_CHARS left after the last place to cut it (text without
spaces: Chinese or Japanese, a base64 blob).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

LONG_TEXT_CHARS = 1 << 20  # up to this, texts are encoded whole, in batches, as always
PIECE_CHARS = 1 << 20  # a piece's length, about: some 100 MB of the tokenizer's memory
MAX_PIECE_CHARS = 8 << 20  # the most given to a tokenizer at once: under 1 GB of its memory
SPLIT_HINT = "split it into shorter documents (at paragraphs) before converting"

# A letter or digit ([^\W_] is str.isalnum), then the space a piece may end before.
_CUT = re.compile(r"[^\W_] ")

_CONTRACTIONS = "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_O200K_WORD = ("[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*"
               "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" + _CONTRACTIONS + "?|"
               "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
               "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" + _CONTRACTIONS + "?|")
# Split regexes that never join a letter or digit to the space after it, and look behind nothing.
SPLIT_REGEXES = {
    "gpt2": "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
    "cl100k": _CONTRACTIONS + "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
              "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "qwen2": _CONTRACTIONS + "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
             "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "o200k": _O200K_WORD + "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+"
             "|\\s+(?!\\S)|\\s+",
}
_CHARWISE_NORMALIZERS = {"BertNormalizer", "Lowercase", "NFC", "NFD", "NFKC", "NFKD",
                         "StripAccents", "Nmt"}
_WHITESPACE_SPLITTERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}
_RUNWISE = {"Digits", "Punctuation"}  # split within runs of digits or punctuation only
# Whitespace (literal, \s, \t, \n), each maybe repeated: a regex that matches nothing else
_WHITESPACE_REGEX = re.compile(r"(?:(?:\s|\\[stn])(?:[+*]|\{\d+(?:,\d*)?\})?)+")

TextIds = np.ndarray | str  # a text's ids, or why it cannot be tokenized


class UncuttableText(Exception):
    """A long text with no place to cut it within MAX_PIECE_CHARS; the message says where."""


def cut_problem(spec: dict[str, Any]) -> str | None:
    """Why texts cannot be cut for the tokenizer whose tokenizer.json holds `spec` (None: they
    can, as the module's docstring says)."""
    return (_normalizer_problem(spec.get("normalizer"))
            or _pre_tokenizer_problem(spec.get("pre_tokenizer"))
            or _added_token_problem(spec.get("added_tokens") or [],
                                    spec.get("normalizer") is not None))


def _normalizer_problem(spec: dict[str, Any] | None) -> str | None:
    if spec is None:
        return None
    kind = spec.get("type")
    if kind == "Sequence":
        return next(filter(None, map(_normalizer_problem, spec.get("normalizers", []))), None)
    if kind in _CHARWISE_NORMALIZERS or (kind == "Replace" and _whitespace_replace(spec)):
        return None
    return f"its {kind} normalizer may change the text across a cut"


def _whitespace_replace(spec: dict[str, Any]) -> bool:
    """A Replace whose pattern matches whitespace only, by whitespace."""
    pattern = spec.get("pattern") or {}
    source = pattern.get("String", pattern.get("Regex", ""))
    content = spec.get("content", "")
    return (bool(source) and _WHITESPACE_REGEX.fullmatch(source) is not None
            and ("String" not in pattern or source.isspace())
            and (content == "" or content.isspace()))


def _pre_tokenizer_problem(spec: dict[str, Any] | None) -> str | None:
    """None when the pre-tokenizer splits before the space of every cut (see the docstring)."""
    if spec is None:
        return "it has no pre-tokenizer: the whole text is one word to its model"
    members = spec.get("pretokenizers", []) if spec.get("type") == "Sequence" else [spec]
    rewriter = None  # the member that turned spaces into other characters
    for member in members:
        kind = member.get("type")
        splits = _splits_at_spaces(member)
        if splits and rewriter is None:
            return None  # pre-tokens from here on never straddle a cut
        if splits:
            return f"its {kind} pre-tokenizer comes after {rewriter}, which rewrites spaces"
        if kind in ("ByteLevel", "Metaspace"):
            rewriter = kind
        elif kind not in _RUNWISE:
            return f"its {kind} pre-tokenizer may join characters across a space"
    return "its pre-tokenizer does not split at spaces (Metaspace without split, say)"


def _splits_at_spaces(member: dict[str, Any]) -> bool:
    kind = member.get("type")
    if kind in _WHITESPACE_SPLITTERS:
        return True
    if kind == "CharDelimiterSplit":
        return member.get("delimiter") == " "
    if kind == "ByteLevel":
        return bool(member.get("use_regex", True))
    if kind == "Metaspace":
        return bool(member.get("split", True))
    if kind == "Split":
        regex = (member.get("pattern") or {}).get("Regex")
        return (regex in SPLIT_REGEXES.values() and not member.get("invert", False)
                and member.get("behavior") in ("Isolated", "Removed"))
    return False


def _added_token_problem(tokens: list[dict[str, Any]], normalizes: bool) -> str | None:
    for token in tokens:
        content = token.get("content", "")
        if any(c.isspace() for c in content) and not content.isspace():
            return f"its added token {content!r} holds whitespace"
        if token.get("rstrip") and (content[-1:].isalnum()
                                    or (normalizes and token.get("normalized"))):
            return f"its added token {content!r} takes the whitespace after it (rstrip)"
    return None


def piece_ends(text: str) -> Iterator[int]:
    """Where the pieces of `text` end, in order, the last at len(text); raises UncuttableText
    (after yielding the ends before it) where no cut lies within MAX_PIECE_CHARS of the last
    and more than that is left."""
    start = 0
    while len(text) - start > 2 * PIECE_CHARS:
        cut = _CUT.search(text, start + PIECE_CHARS - 1, start + MAX_PIECE_CHARS)
        if cut is None and len(text) - start <= MAX_PIECE_CHARS:
            break  # the rest, whole
        if cut is None:
            raise UncuttableText(
                f"a document of {len(text):,} characters with no place to cut it (a space after "
                f"a letter or digit) within {MAX_PIECE_CHARS:,} characters of character "
                f"{start:,}: {SPLIT_HINT}")
        start = cut.end() - 1
        yield start
    yield len(text)


def encode_texts(texts: list[str], encode: Callable[[list[str]], list[np.ndarray]],
                 tokenizer: str, vocab_size: int,
                 problem: Callable[[], str | None]) -> list[TextIds]:
    """Each text's ids as `encode` (a batch of texts -> their ids) gives them, long texts
    encoded in pieces; `problem()` says why the tokenizer's texts cannot be cut (None: they
    can), `tokenizer` names it in a reject's reason."""
    if all(len(text) <= LONG_TEXT_CHARS for text in texts):
        return list(encode(texts))  # the way every ordinary batch goes
    short = iter(encode([t for t in texts if len(t) <= LONG_TEXT_CHARS]))
    # A long text's ids in the narrowest type: they may be hundreds of MB.
    dtype = np.min_scalar_type(max(vocab_size - 1, 0))
    return [_encode_long(t, encode, tokenizer, problem(), dtype) if len(t) > LONG_TEXT_CHARS
            else next(short) for t in texts]


def _encode_long(text: str, encode: Callable[[list[str]], list[np.ndarray]], tokenizer: str,
                 problem: str | None, dtype: np.dtype) -> TextIds:
    if problem is None:
        return _encode_pieces(text, encode, dtype)
    if len(text) <= MAX_PIECE_CHARS:
        return encode([text])[0]
    return (f"a document of {len(text):,} characters, more than the {MAX_PIECE_CHARS:,} "
            f"tokenized at once, and {tokenizer} cannot be cut exactly ({problem}): "
            f"{SPLIT_HINT}")


def _encode_pieces(text: str, encode: Callable[[list[str]], list[np.ndarray]],
                   dtype: np.dtype) -> TextIds:
    ids, start = [], 0
    try:
        for stop in piece_ends(text):
            ids.append(encode([text[start:stop]])[0].astype(dtype, copy=False))
            start = stop
    except UncuttableText as exc:
        return str(exc)
    return np.concatenate(ids)
