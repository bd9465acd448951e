"""examples/train_text.py: packed batches through varlen attention, padded ones through a
masked SDPA, and the two giving the same outputs for the same documents."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest
import torch

from datapipe.text.collate import CollateOptions, collate
from examples import train_text
from tests.conftest import convert

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
LENGTHS = [5, 11, 3, 8]


def _documents(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(1, 50, size=sum(LENGTHS)).astype(np.int64), np.array(LENGTHS)


def _batches(pad_to: int = 1) -> tuple[dict, dict]:
    """The same documents as one packed and one padded batch."""
    tokens, lengths = _documents()
    rows = np.arange(len(lengths) + 1)
    packed = collate(tokens, lengths, rows, CollateOptions("packed", pad_to_multiple_of=pad_to))
    padded = collate(tokens, lengths, rows, CollateOptions("padded"))
    return packed, padded


def _padded_real(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return values[mask.bool()]  # row by row: the documents back to back, as packed


def test_padded_attention_matches_the_packed_masked_path() -> None:
    packed, padded = _batches()
    gen = torch.Generator().manual_seed(0)
    total, width = int(sum(LENGTHS)), padded["input_ids"].shape[1]
    q, k, v = (torch.randn(len(LENGTHS), width, 2, 8, generator=gen) for _ in range(3))
    mask = padded["attention_mask"]
    out_padded = train_text.padded_attention(q, k, v, mask)
    flat = [_padded_real(t, mask) for t in (q, k, v)]
    assert flat[0].shape == (total, 2, 8)
    out_packed = train_text.masked_varlen_attention(*flat, packed["cu_seqlens"])
    torch.testing.assert_close(_padded_real(out_padded, mask), out_packed)


def test_the_model_gives_the_same_logits_for_either_layout() -> None:
    packed, padded = _batches(pad_to=8)  # a dummy tail sequence pads the packed batch
    torch.manual_seed(0)
    model = train_text.TinyLM(64, dim=32, heads=4, max_positions=64)
    real = int(packed["num_real_tokens"])
    logits_packed = model(packed)[:real]
    logits_padded = _padded_real(model(padded), padded["attention_mask"])
    torch.testing.assert_close(logits_padded, logits_packed, rtol=1e-4, atol=1e-5)


def test_causal_arguments_of_each_torch_varlen_signature() -> None:
    def new(q, k, v, cu_q, cu_k, max_q, max_k, *, return_aux=None, scale=None,
            window_size=(-1, -1)):
        pass

    def old(q, k, v, cu_q, cu_k, max_q, max_k, is_causal=False, return_aux=None):
        pass

    def neither(q, k, v, cu_q, cu_k, max_q, max_k):
        pass

    assert train_text.causal_kwargs(new) == {"window_size": (-1, 0)}
    assert train_text.causal_kwargs(old) == {"is_causal": True}
    assert train_text.causal_kwargs(neither) is None
    if (varlen := train_text._torch_varlen()) is not None:  # this torch's own
        assert "window_size" in inspect.signature(varlen).parameters or \
            "is_causal" in inspect.signature(varlen).parameters


def test_on_the_cpu_packed_batches_take_the_masked_path() -> None:
    assert train_text.varlen_backend(torch.device("cpu")) == "masked"


@needs_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("backend", ["torch", "flash-attn"])
def test_varlen_kernels_match_the_masked_path(backend: str) -> None:
    if backend == "torch" and train_text._torch_varlen() is None:
        pytest.skip("this torch has no varlen_attn")
    if backend == "flash-attn":
        pytest.importorskip("flash_attn")
    packed, _ = _batches()
    cu = packed["cu_seqlens"].cuda()
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(int(sum(LENGTHS)), 4, 64, device="cuda", generator=gen,
                           dtype=torch.bfloat16) for _ in range(3))
    got = train_text.varlen_attention(q, k, v, cu, packed["max_seqlen"], backend=backend)
    want = train_text.masked_varlen_attention(q.float(), k.float(), v.float(), cu)
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("train-text")
    rng = np.random.default_rng(1)
    words = ["alpha", "beta", "gamma", "delta", "pi"]
    lines = [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(1, 40, size=120)]
    (root / "a.txt").write_text("\n".join(lines) + "\n")
    convert("text", root / "a.txt", root / "out", "--tokenizer", "bytes", "--append-eos")
    return root / "out"


def test_compare_padded_trains_both_layouts_on_the_same_real_tokens(
        corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train_text.main([str(corpus), "--steps", "3", "--max-tokens", "512", "--device", "cpu",
                     "--compare-padded"])
    lines = capsys.readouterr().out.splitlines()
    packed = next(line for line in lines if line.startswith("packed: trained 3 steps"))
    padded = next(line for line in lines if line.startswith("padded: trained"))
    tokens = [int(line.split(" on ")[1].split(" real")[0].replace(",", ""))
              for line in (packed, padded)]
    assert tokens[1] >= tokens[0] > 0, "the padded run sees at least as many real tokens"
    assert "varlen attention: masked" in packed and "SDPA, masked" in padded
    assert any(line.startswith("packed / padded: ") for line in lines)


def test_a_budget_too_small_to_pad_is_refused_before_training(
        corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(train_text.dp.ArgumentError, match="more than max_tokens=64"):
        train_text.main([str(corpus), "--steps", "3", "--max-tokens", "64", "--device", "cpu",
                         "--compare-padded"])
    assert "packed: trained" not in capsys.readouterr().out


# ---------------------------------------------------------------- --model: a transformers Llama


def _rows(lines: list[str]) -> dict[str, str]:
    """"packed (sdpa): ..." -> {"packed (sdpa)": "..."}"""
    return dict(line.split(": ", 1) for line in lines if line.startswith(("packed", "padded")))


def _run_figures(text: str) -> tuple[float, float]:
    """(loss-target tokens/s, final loss) of a row's line."""
    rate = float(text.split(" loss-target tokens/s")[0].replace(",", ""))
    return rate, float(text.split(" -> ")[1].split()[0])


def test_an_hf_llama_trains_on_both_layouts_on_the_cpu(
        corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train_text.main([str(corpus), "--model", "tiny", "--attn", "sdpa", "eager", "--steps", "3",
                     "--max-tokens", "512", "--device", "cpu", "--compare-padded"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("tiny: ") and lines[0].endswith(" parameters, float32, on CPU")
    rows = _rows(lines)
    assert list(rows) == ["packed (sdpa)", "padded (sdpa)", "packed / padded (sdpa)",
                          "packed (eager)", "padded (eager)", "packed / padded (eager)"]
    for name in ("packed (sdpa)", "padded (sdpa)", "packed (eager)", "padded (eager)"):
        rate, final_loss = _run_figures(rows[name])
        assert rate > 0 and np.isfinite(final_loss), rows[name]
        assert "step p50 " in rows[name] and " p90 " in rows[name], rows[name]
        assert "peak memory n/a" in rows[name] and "(2 timed steps, " in rows[name]
    assert rows["packed / padded (sdpa)"].endswith("x the loss-target tokens/s")
    # The same seed, model and documents in the same order: eager and sdpa agree step by step.
    for layout in ("packed", "padded"):
        assert _run_figures(rows[f"{layout} (sdpa)"])[1] == pytest.approx(
            _run_figures(rows[f"{layout} (eager)"])[1], abs=2e-3)


def test_attention_this_machine_lacks_is_a_skipped_row(
        corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("on a CUDA device these run (tests/suite/test_hf_train.py)")
    train_text.main([str(corpus), "--model", "tiny", "--attn", "flash_attention_2",
                     "flex_attention", "--steps", "3", "--device", "cpu", "--compare-padded"])
    rows = _rows(capsys.readouterr().out.splitlines())
    assert rows == {"packed (flash_attention_2)": "skipped: flash_attention_2 runs on CUDA only",
                    "padded (flash_attention_2)": "skipped: flash_attention_2 runs on CUDA only",
                    "packed (flex_attention)": "skipped: flex_attention is measured on CUDA only",
                    "padded (flex_attention)": "skipped: flex_attention is measured on CUDA only"}


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "tiny", "--attn", "flash"], "argument --attn: invalid choice: 'flash'"),
    (["--model", "llama-7b"], "argument --model: invalid choice: 'llama-7b'"),
    (["--attn", "sdpa"], "--attn chooses a transformers model's attention: give --model"),
])
def test_a_wrong_model_or_attention_is_a_usage_error(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        train_text.parse_args(["tokens", *argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.fixture(scope="module")
def few_documents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("few")
    lines = ["pi", "alpha beta gamma delta", "gamma", "delta pi alpha beta gamma delta pi beta",
             "beta beta alpha", "alpha gamma pi delta beta"]
    (root / "a.txt").write_text("\n".join(lines) + "\n")
    convert("text", root / "a.txt", root / "out", "--tokenizer", "bytes", "--append-eos")
    return root / "out"


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_the_packed_and_padded_hf_batches_give_the_same_loss(few_documents: Path,
                                                             attn: str) -> None:
    """What the training run gives the model of each layout's batch (the same documents in
    one batch each, both padded to the run's multiple): the same mean loss over the same
    targets, so the two layouts train the same model on the same documents. The model is
    float64, its logits float64 alike (tests/text/test_hf_equivalence.py); transformers takes
    the loss in float32, hence float32's rounding."""
    losses, targets = {}, {}
    for layout, shape in train_text.hf.SHAPES.items():
        with train_text.dp.TokenLoader(few_documents, max_tokens=4096, shuffle=False,
                                       pad_to_multiple_of=train_text.hf.PAD_MULTIPLE,
                                       **shape) as loader:
            (batch,) = list(loader)
        model = train_text.hf.build_model("tiny", 512, 4096, attn, "cpu").double().eval()
        with torch.no_grad():
            losses[layout] = float(train_text.hf.loss_of(model, batch, layout))
        targets[layout] = batch["num_loss_tokens"]
    assert targets["packed"] == targets["padded"] > 0
    assert losses["packed"] == pytest.approx(losses["padded"], rel=0, abs=1e-6)
