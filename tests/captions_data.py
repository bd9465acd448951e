"""Captioned images for tests: a CLIP-style tokenizer trained in a second, and captions."""

from __future__ import annotations

import json
from pathlib import Path

WORDS = ("a photo of dog cat red blue small large car tree on the grass street with two "
         "people sitting near old house bright sky over water boat bird flying").split()


def caption(n: int, words: int = 6) -> str:
    """A made-up caption, different for each n."""
    return " ".join(WORDS[(n * 7 + 3 * k + k * k) % len(WORDS)] for k in range(words))


def clip_style_tokenizer(folder: Path, vocab_size: int = 300) -> Path:
    """A byte-level BPE tokenizer.json whose template wraps every text in
    <|startoftext|> ... <|endoftext|>, as CLIP's does; saved with a pad token beside it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[
        "<|startoftext|>", "<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([caption(n, 12) for n in range(400)], trainer)
    bos, eos = tokenizer.token_to_id("<|startoftext|>"), tokenizer.token_to_id("<|endoftext|>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A <|endoftext|>",
        special_tokens=[("<|startoftext|>", bos), ("<|endoftext|>", eos)])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tokenizer.json"
    tokenizer.save(str(path))
    # As transformers saves CLIP's: its pad token is the end of text.
    (folder / "special_tokens_map.json").write_text(json.dumps({"pad_token": "<|endoftext|>"}))
    return path


def write_captioned_tar(path: Path, captions: list, first: int = 0) -> Path:
    """A tar as webdataset's TarWriter writes it: a jpg and a json (its "caption": a string or
    a list of them) per sample."""
    import webdataset as wds

    from tests.imagegen import jpeg_bytes, noise_image

    path.parent.mkdir(parents=True, exist_ok=True)
    with wds.TarWriter(str(path)) as sink:
        for n, value in enumerate(captions, first):
            sink.write({"__key__": f"{n:06d}",
                        "jpg": jpeg_bytes(noise_image(40 + n % 5 * 4, 32, n)),
                        "json": json.dumps({"caption": value})})
    return path
