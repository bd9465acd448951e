"""examples/train_patches.py: attention stays within each image of a packed batch, and a few
training steps run on PatchLoader's batches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from examples import train_patches
from tests.conftest import convert
from tests.loader.patch_data import make_photos


def test_masked_attention_equals_each_image_alone() -> None:
    torch.manual_seed(0)
    lengths = [5, 11, 3]
    q, k, v = (torch.randn(sum(lengths), 2, 8, dtype=torch.float64) for _ in range(3))
    cu = torch.tensor([0, 5, 16, 19], dtype=torch.int32)
    packed = train_patches.masked_varlen_attention(q, k, v, cu)
    for lo, hi in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
        alone = train_patches.masked_varlen_attention(q[lo:hi], k[lo:hi], v[lo:hi],
                                                      torch.tensor([0, hi - lo]))
        torch.testing.assert_close(packed[lo:hi], alone)


@pytest.mark.parametrize("preset", ["navit", "qwen2_vl"])
def test_training_steps_run_on_packed_patches(tmp_path: Path, preset: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    sizes = [(64 + 24 * i, 48 + 16 * (i % 5)) for i in range(12)]
    make_photos(tmp_path / "src" / "class_0", sizes[:6])
    make_photos(tmp_path / "src" / "class_1", sizes[6:], seed=1)
    convert("images", tmp_path / "src", tmp_path / "data", "--short-side", "0")
    losses = train_patches.train(train_patches.parse_args(
        [str(tmp_path / "data"), "--preset", preset, "--max-patches", "512", "--steps", "10",
         "--workers", "0"]))
    assert len(losses) == 10 and all(torch.isfinite(torch.tensor(losses)))
    assert "patch efficiency" in capsys.readouterr().out
