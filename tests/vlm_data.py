"""Image conversations for the VLM tests: a small tokenizer with Qwen2-VL's special tokens and
a Qwen2-VL-style chat template (with generation markers), made here (no download), photos,
and LLaVA-style JSON over them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from datapipe.suite.photo_sources import procedural_photo

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
           "<|image_pad|>", "<|video_pad|>"]
TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{% set items = [{'type': 'text', 'text': "
    "message['content']}] %}{% else %}{% set items = message['content'] %}{% endif %}"
    "{% if message['role'] == 'assistant' %}{% generation %}"
    "{% for item in items %}{{ item['text'] }}{% endfor %}<|im_end|>{% endgeneration %}{{ '\\n' }}"
    "{% else %}{% for item in items %}{% if item['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ item['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>{{ '\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
WORDS = ("what is in this picture a cat dog sits on the red blue mat tree sky describe "
         "colours shapes how many there are two three image photo left right of").split()


def make_tokenizer(folder: Path, template: str = TEMPLATE, special: list[str] = SPECIAL) -> Path:
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


def make_photo_files(folder: Path, sizes: list[tuple[int, int]], seed: int = 0) -> list[str]:
    """photo_<i>.jpg of sizes[i] (width, height); their names."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i, (w, h) in enumerate(sizes):
        names.append(f"photo_{i:03d}.jpg")
        procedural_photo(np.random.default_rng([seed, i]), w, h).save(folder / names[-1],
                                                                      quality=92)
    return names


def sentence(rng: np.random.Generator, low: int = 3, high: int = 12) -> str:
    return " ".join(rng.choice(WORDS, int(rng.integers(low, high))))


def llava_records(images: list[str], count: int, seed: int = 0) -> list[dict]:
    """`count` LLaVA-style conversations: 0, 1 or 2 images each (drawn from `images`), one or
    two exchanges, a system turn now and then."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(count):
        chosen = [images[int(j)] for j in rng.integers(0, len(images), int(rng.integers(0, 3)))]
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


def make_llava(root: Path, count: int = 24, sizes: list[tuple[int, int]] | None = None,
               seed: int = 0) -> Path:
    """root/images/*.jpg and root/data.json; returns the JSON's path."""
    sizes = sizes or [(64, 48), (48, 64), (90, 90), (120, 40), (30, 30), (200, 150)]
    names = [f"images/{n}" for n in make_photo_files(root / "images", sizes, seed)]
    path = root / "data.json"
    path.write_text(json.dumps(llava_records(names, count, seed)))
    return path
