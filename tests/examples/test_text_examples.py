"""examples/hf_trainer_packed.py and examples/flex_document_mask.py, run as a user would."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from examples import flex_document_mask
from tests.conftest import convert


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("text-examples")
    rng = np.random.default_rng(1)
    words = ["alpha", "beta", "gamma", "delta", "pi"]
    lines = [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(1, 40, size=120)]
    (root / "a.txt").write_text("\n".join(lines) + "\n")
    convert("text", root / "a.txt", root / "out", "--tokenizer", "bytes", "--append-eos")
    return root / "out"


def test_hf_trainer_learns_from_packed_batches(corpus: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    from examples import hf_trainer_packed

    losses = hf_trainer_packed.main([str(corpus), "--steps", "4", "--max-tokens", "512"])
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert "trained 4 steps on" in capsys.readouterr().out


def test_flex_document_mask_matches_each_document_alone(corpus: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # flex_attention uncompiled on the CPU
        worst = flex_document_mask.main([str(corpus), "--max-tokens", "256", "--batches", "2"])
    assert worst < 1e-5
