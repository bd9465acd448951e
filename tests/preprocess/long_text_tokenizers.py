"""Real tokenizers of every kind `convert text` takes, trained small on a text that holds what
makes cutting a long document hard, and that text. Shared by the long-document tests."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

# Words, marks and spaces around which a careless cut would change the ids: contractions,
# combining accents, scripts without spaces, digits in runs, added tokens, whitespace of every
# kind, characters that NFKC turns into several (ﷺ, ㈠), Unicode's Prepend (U+0600).
FRAGMENTS = [
    "the", "quick", "Brown", "fox", "don't", "it's", "we'll", "THEY'RE", "naïve", "cafe\u0301",
    "Straße", "İstanbul", "ΣΟΦΟΣ", "日本語の文章です", "中文字", "مرحبا", "שלום", "12345678",
    "3.14", "1,000", "e-mail", "(paren)", '"quoted"', "...", "!!", "?", "—", "🙂", "👍🏽",
    "\u00a0", "\u3000", "[SEP]", "<|endoftext|>", "<mask>", "</s>", "x\u0300", "ﷺ", "㈠", "²",
    "ﬁne", "_under_score", "CamelCase", "ALLCAPS", "a'b", "zero\u200bwidth", "\u0600", "a", "I",
    "end.", "1990s",
]
SEPARATORS = [" "] * 12 + ["", "  ", "   ", "\n", " \n ", "\n\n", "\t", "\r\n", " \t"]
SPECIALS = ["[UNK]", "<unk>", "[SEP]", "<|endoftext|>", "</s>"]


def tricky_text(chars: int, seed: int = 0) -> str:
    """About `chars` characters of FRAGMENTS joined by SEPARATORS, in a seeded order."""
    rng = random.Random(seed)
    parts, size = [], 0
    while size < chars:
        part = rng.choice(FRAGMENTS) + rng.choice(SEPARATORS)
        parts.append(part)
        size += len(part)
    return "".join(parts)


def _save(tok, path: Path, trainer, corpus: list[str]) -> Path:
    from tokenizers import AddedToken

    trainer.show_progress = False
    tok.train_from_iterator(corpus, trainer)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    tok.save(str(path))
    return path


def wordpiece_bert(path: Path, corpus: list[str]) -> Path:
    """As BERT's: BertNormalizer (lowercase, accents stripped, CJK spaced), BertPreTokenizer."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=12))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return _save(tok, path, trainers.WordPieceTrainer(vocab_size=400, special_tokens=SPECIALS),
                 corpus)


def byte_level_bpe(path: Path, corpus: list[str], add_prefix_space: bool = False) -> Path:
    """As GPT-2's: the ByteLevel pre-tokenizer's regex; with add_prefix_space, as RoBERTa's,
    here lowercased and NFC."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    if add_prefix_space:
        tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    return _save(tok, path, trainer, corpus)


def split_regex_bpe(path: Path, corpus: list[str], regex: str, normalizer=None) -> Path:
    """As Llama 3's, Qwen 2's (NFC) or GPT-4o's: a Split regex, then bytes."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    return _save(tok, path, trainer, corpus)


def unigram_t5(path: Path, corpus: list[str]) -> Path:
    """As T5's: NFKC and runs of spaces made one, WhitespaceSplit then Metaspace, Unigram."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Metaspace()])
    trainer = trainers.UnigramTrainer(vocab_size=300, special_tokens=SPECIALS,
                                      unk_token="<unk>")
    return _save(tok, path, trainer, corpus)


def unigram_metaspace(path: Path, corpus: list[str]) -> Path:
    """As XLM-R's, with Nmt and accents stripped for its charsmap: Metaspace splitting."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.Nmt(), normalizers.NFD(),
                                           normalizers.StripAccents()])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(split=True)
    trainer = trainers.UnigramTrainer(vocab_size=300, special_tokens=SPECIALS,
                                      unk_token="<unk>")
    return _save(tok, path, trainer, corpus)


def wordlevel_whitespace(path: Path, corpus: list[str]) -> Path:
    """Words (and each digit) of NFKD text."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.normalizer = normalizers.NFKD()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.Whitespace()])
    return _save(tok, path, trainers.WordLevelTrainer(vocab_size=300, special_tokens=SPECIALS),
                 corpus)


def wordpiece_char_delimiter(path: Path, corpus: list[str]) -> Path:
    """Punctuation apart, then words split at spaces (CharDelimiterSplit)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Punctuation(),
                                                 pre_tokenizers.CharDelimiterSplit(" ")])
    return _save(tok, path, trainers.WordPieceTrainer(vocab_size=400, special_tokens=SPECIALS),
                 corpus)


def sentencepiece_bpe(path: Path, corpus: list[str]) -> Path:
    """As Llama 2's or Mistral's: Metaspace without split, the whole text one word to BPE."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=False)
    return _save(tok, path, trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS),
                 corpus)


def _split(regex_name: str, normalizer: str | None = None) -> Callable[[Path, list[str]], Path]:
    def make(path: Path, corpus: list[str]) -> Path:
        from tokenizers import normalizers

        from preprocess.long_texts import SPLIT_REGEXES

        chosen = getattr(normalizers, normalizer)() if normalizer else None
        return split_regex_bpe(path, corpus, SPLIT_REGEXES[regex_name], chosen)
    return make


# Every kind a long document is cut for, by name.
CUTTABLE: dict[str, Callable[[Path, list[str]], Path]] = {
    "wordpiece-bert": wordpiece_bert,
    "byte-level-bpe": byte_level_bpe,
    "byte-level-bpe-prefix-space": lambda p, c: byte_level_bpe(p, c, add_prefix_space=True),
    "gpt2-split": _split("gpt2", "NFKC"),
    "llama3-split": _split("cl100k"),
    "qwen2-split": _split("qwen2", "NFC"),
    "o200k-split": _split("o200k"),
    "unigram-t5": unigram_t5,
    "unigram-metaspace": unigram_metaspace,
    "wordlevel-whitespace": wordlevel_whitespace,
    "wordpiece-char-delimiter": wordpiece_char_delimiter,
}


def minilm_tokenizer() -> Path | None:
    """The WordPiece tokenizer.json of all-MiniLM-L6-v2, when its package is installed."""
    from datapipe.suite.fixtures import wordpiece_tokenizer

    return wordpiece_tokenizer()
