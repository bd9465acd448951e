"""examples/train_vlm.py: a tiny Qwen2-VL fine-tunes for a few steps from a LLaVA-style JSON,
its loss going down on the packed batches."""

from __future__ import annotations

from pathlib import Path

import pytest

from examples import train_vlm
from tests.conftest import convert
from tests.vlm_data import make_llava, make_tokenizer


def test_a_few_steps_from_llava_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    tokenizer = make_tokenizer(tmp_path / "tok")
    src = make_llava(tmp_path / "src", count=16)
    convert("vlm", src, tmp_path / "data", "--tokenizer", tokenizer, "--workers", "1")
    losses = train_vlm.train(train_vlm.parse_args(
        [str(tmp_path / "data"), "--max-tokens", "1024", "--steps", "12", "--workers", "1"]))
    assert len(losses) == 12
    assert sum(losses[-3:]) < sum(losses[:3])  # it learns the conversations
    assert "token efficiency" in capsys.readouterr().out
