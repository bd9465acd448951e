"""Image conversations over the suite's photos, and a small tokenizer with Qwen2-VL's special
tokens and a Qwen2-VL-style chat template (made here: no download), for the vlm group and the
tests. Deterministic: the same photos give the same conversations."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
           "<|image_pad|>", "<|video_pad|>"]
# Qwen2-VL's template, less its defaults, with {% generation %} markers (the assistant mask).
TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{% set items = [{'type': 'text', 'text': "
    "message['content']}] %}{% else %}{% set items = message['content'] %}{% endif %}"
    "{% if message['role'] == 'assistant' %}{% generation %}"
    "{% for item in items %}{{ item['text'] }}{% endfor %}<|im_end|>{% endgeneration %}"
    "{{ '\\n' }}"
    "{% else %}{% for item in items %}{% if item['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ item['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>{{ '\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
WORDS = ("what is in this picture a cat dog sits on the red blue mat tree sky describe "
         "colours shapes how many there are two three image photo left right of").split()


def make_tokenizer(folder: Path, template: str = TEMPLATE,
                   special: list[str] = SPECIAL) -> Path:
    """A byte-level BPE tokenizer trained on a few sentences, with the special tokens; its
    tokenizer.json and a tokenizer_config.json holding the chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    rng = np.random.default_rng(0)
    tok.train_from_iterator([" ".join(rng.choice(WORDS, 12)) for _ in range(300)], trainer)
    tok.save(str(folder / "tokenizer.json"))
    config = {"chat_template": template, "eos_token": "<|im_end|>",
              "pad_token": "<|endoftext|>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def sentence(rng: np.random.Generator, low: int = 3, high: int = 12) -> str:
    return " ".join(rng.choice(WORDS, int(rng.integers(low, high))))


def llava_records(images: list[str], count: int, seed: int = 0,
                  most_images: int = 2) -> list[dict]:
    """`count` LLaVA-style conversations: 0 to `most_images` images each (drawn from
    `images`), one or two exchanges, a system turn now and then."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(count):
        picks = rng.integers(0, len(images), int(rng.integers(0, most_images + 1)))
        chosen = [images[int(j)] for j in picks]
        tags = "".join("<image>\n" for _ in chosen)
        turns = [{"from": "human", "value": tags + sentence(rng)},
                 {"from": "gpt", "value": sentence(rng)}]
        if rng.random() < 0.5:
            turns += [{"from": "human", "value": sentence(rng)},
                      {"from": "gpt", "value": sentence(rng, 1, 20)}]
        if rng.random() < 0.3:
            turns.insert(0, {"from": "system", "value": "You describe images."})
        record: dict = {"id": str(i), "conversations": turns}
        if len(chosen) == 1:
            record["image"] = chosen[0]
        elif chosen:
            record["image"] = chosen
        records.append(record)
    return records
