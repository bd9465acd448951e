"""Image conversations for the VLM tests: a small tokenizer with Qwen2-VL's special tokens and
a Qwen2-VL-style chat template (with generation markers), made here (no download), photos,
and LLaVA-style JSON over them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from datapipe.suite.photo_sources import procedural_photo
from datapipe.suite.vlm_conversations import (  # noqa: F401 - the tests' names
    SPECIAL,
    TEMPLATE,
    llava_records,
    make_tokenizer,
)


def make_photo_files(folder: Path, sizes: list[tuple[int, int]], seed: int = 0) -> list[str]:
    """photo_<i>.jpg of sizes[i] (width, height); their names."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i, (w, h) in enumerate(sizes):
        names.append(f"photo_{i:03d}.jpg")
        procedural_photo(np.random.default_rng([seed, i]), w, h).save(folder / names[-1],
                                                                      quality=92)
    return names


def make_llava(root: Path, count: int = 24, sizes: list[tuple[int, int]] | None = None,
               seed: int = 0) -> Path:
    """root/images/*.jpg and root/data.json; returns the JSON's path."""
    sizes = sizes or [(64, 48), (48, 64), (90, 90), (120, 40), (30, 30), (200, 150)]
    names = [f"images/{n}" for n in make_photo_files(root / "images", sizes, seed)]
    path = root / "data.json"
    path.write_text(json.dumps(llava_records(names, count, seed)))
    return path
