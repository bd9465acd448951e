"""examples/train_clip.py as a user runs it: captioned images made, converted with their
captions, and a tiny CLIP-style model trained one epoch on the CPU from the loader's batches."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from examples import train_clip


def test_the_clip_example_converts_and_trains_one_epoch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    losses = train_clip.main(["--out", str(tmp_path), "--images", "48", "--batch-size", "8"])
    assert len(losses) == 6 and all(math.isfinite(x) for x in losses)
    out = capsys.readouterr().out
    assert "trained 1 epoch, 6 steps" in out
    assert (tmp_path / "images" / "shapes" / "0000.txt").read_text() == "a red square\n"
