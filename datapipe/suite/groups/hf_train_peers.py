"""A transformers Llama (random init, built here: no download) trained on TokenLoader's batches
and timed step by step: the measured run of the gpu suite's hf_train group and of
`examples/train_text.py --model`.

Packed batches come through preset="hf" (HF padding-free: (1, T) `input_ids`, `position_ids`
that restart at each document, `cu_seq_lens_q/k` and `max_length_q/k` for flash attention),
padded ones through layout="padded" with `attention_mask`; both with HF's `labels` (unshifted,
the model shifts) and `use_cache=False` (the model keeps its config's default, True: the batch
turns the cache off, as docs/text.md tells users). One run is one model, one attention
implementation (HF's `attn_implementation`) and one layout; it reports loss-target tokens/s
(the targets that count, `num_loss_tokens`), step time p50/p90 (each step ends waiting for the
GPU), peak GPU memory and the losses. On CUDA the weights are bfloat16; on the CPU float32.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

from datapipe.errors import ArgumentError, DataError
from datapipe.suite.groups.handoff import percentile
from datapipe.suite.runner import NO_CUDA

if TYPE_CHECKING:
    import torch

ATTENTIONS = ("flash_attention_2", "sdpa", "flex_attention", "eager")
LAYOUTS = ("packed", "padded")
PAD_MULTIPLE = 64  # both layouts: fewer distinct shapes (flex_attention compiles per shape)
# What the model is given of each layout's batch: the rest is bookkeeping (or seq_idx, which a
# Llama does not read). use_cache=False comes with the batch: the model keeps its config's
# default (True), as a user's would.
MODEL_INPUTS = {"packed": ("input_ids", "position_ids", "labels", "cu_seq_lens_q",
                           "cu_seq_lens_k", "max_length_q", "max_length_k", "use_cache"),
                "padded": ("input_ids", "attention_mask", "labels", "use_cache")}
# The TokenLoader settings of each layout's batches.
SHAPES: dict[str, dict[str, Any]] = {
    "packed": {"preset": "hf"},
    "padded": {"layout": "padded", "labels": "hf", "add_fields": ("use_cache",)}}
FLEX_TORCH = (2, 5)


@dataclass(frozen=True)
class ModelSize:
    """A Llama's shape. The embedding and output layer have at least `min_vocab` rows, so that
    their share of a step is a real tokenizer's whatever the dataset's vocabulary."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    min_vocab: int = 0


# Named by their parameter count at a 32,000-token vocabulary (Llama 2's); a larger one adds
# embedding rows, and every run reports the count it really had.
MODELS = {
    "tiny": ModelSize(64, 128, 2, 4, 2),  # for the CPU: tests and smoke runs
    "llama-134m": ModelSize(768, 2048, 12, 12, 12, min_vocab=32_000),  # GPT-2 small's shape
    "llama-355m": ModelSize(1024, 2560, 24, 16, 16, min_vocab=32_000),
}


@dataclass(frozen=True)
class TrainJob:
    """One measured training run (plain data: the suite passes it to a child as JSON)."""

    tokens: str  # a text dataset made by `datapipe convert text`
    model: str = "tiny"
    attn: str = "sdpa"
    layout: str = "packed"
    max_tokens: int = 4096  # the batch's token budget
    max_seq_len: int = 0  # 0: the budget; longer documents are truncated to it
    steps: int = 20  # timed
    warmup: int = 2  # untimed steps first: kernels, compilation, the allocator
    device: str = "cuda"
    lr: float = 3e-4
    seed: int = 0

    def __post_init__(self) -> None:
        for name, value, choices in (("model", self.model, tuple(MODELS)),
                                     ("attn", self.attn, ATTENTIONS),
                                     ("layout", self.layout, LAYOUTS)):
            if value not in choices:
                raise ArgumentError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
        if self.steps < 1 or self.warmup < 0 or self.max_tokens < 1 or self.max_seq_len < 0:
            raise ArgumentError(f"steps ({self.steps}) must be at least 1, warmup "
                                f"({self.warmup}) and max_seq_len ({self.max_seq_len}) at least "
                                f"0, max_tokens ({self.max_tokens}) at least 1")


def attention_unavailable(attn: str, device: str) -> str | None:
    """Why HF's `attn` implementation cannot be measured on `device` here ("skipped: ..."), or
    None; checked before any model is built."""
    import torch

    cuda = device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        return NO_CUDA
    if attn == "flash_attention_2":
        if not cuda:
            return "skipped: flash_attention_2 runs on CUDA only"
        if find_spec("flash_attn") is None:
            return "skipped: flash_attention_2 needs the flash_attn package (not installed)"
        from transformers.utils import is_flash_attn_2_available

        if not is_flash_attn_2_available():
            return "skipped: transformers does not take this flash_attn (2.3.3 or later needed)"
    if attn == "flex_attention":
        release = tuple(int(part) for part in torch.__version__.split(".")[:2])
        if release < FLEX_TORCH:
            return f"skipped: flex_attention needs torch >= 2.5 (this is {torch.__version__})"
        if not cuda:  # HF compiles it; on the CPU that is minutes, and not what anyone trains
            return "skipped: flex_attention is measured on CUDA only"
    return None


def build_model(size: str, vocab: int, max_positions: int, attn: str, device: str,
                seed: int = 0) -> torch.nn.Module:
    """A randomly initialised LlamaForCausalLM of `size` for `vocab` token ids, in bfloat16 on
    CUDA, float32 elsewhere."""
    import torch
    import transformers

    shape = MODELS[size]
    config = transformers.LlamaConfig(
        vocab_size=max(vocab, shape.min_vocab), hidden_size=shape.hidden,
        intermediate_size=shape.intermediate, num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        max_position_embeddings=max_positions, attn_implementation=attn)
    torch.manual_seed(seed)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    return transformers.LlamaForCausalLM(config).to(device=device, dtype=dtype)


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def make_loader(job: TrainJob) -> Any:
    """The job's TokenLoader: preset="hf" for packed batches, HF labels on padded rows."""
    import datapipe as dp

    cap = {"max_seq_len": job.max_seq_len, "overflow": "truncate"} if job.max_seq_len else {}
    return dp.TokenLoader(job.tokens, max_tokens=job.max_tokens, seed=job.seed,
                          pad_to_multiple_of=PAD_MULTIPLE, device=job.device,
                          **SHAPES[job.layout], **cap)


def model_inputs(batch: dict[str, Any], layout: str) -> dict[str, Any]:
    return {key: batch[key] for key in MODEL_INPUTS[layout]}


def loss_of(model: torch.nn.Module, batch: dict[str, Any], layout: str) -> torch.Tensor:
    """HF's mean loss over the batch's targets (the model shifts the labels itself)."""
    return model(**model_inputs(batch, layout)).loss


def batches(loader: Any) -> Iterator[dict[str, Any]]:
    """The loader's batches, epoch after epoch."""
    for epoch in range(1 << 30):
        loader.set_epoch(epoch)
        if len(loader) == 0:
            raise DataError(f"{loader.path}: not one batch in an epoch")
        yield from loader


def train(job: TrainJob) -> dict[str, Any]:
    """The job's run: `warmup` untimed steps, then `steps` timed ones, each from the end of the
    one before (fetching the batch included) to the end of its optimizer step, the GPU
    drained. A record of figures, or {"status": "skipped: ..."} where the attention
    implementation or the device is not here."""
    import torch

    from datapipe.format.dataset import Dataset

    why = attention_unavailable(job.attn, job.device)
    if why is not None:
        return {"status": why}
    cuda = job.device.startswith("cuda")
    drain = torch.cuda.synchronize if cuda else (lambda: None)
    with Dataset(job.tokens) as dataset:
        vocab = int(dataset.manifest.tokenizer["vocab_size"])
    with make_loader(job) as loader:
        model = build_model(job.model, vocab, job.max_tokens, job.attn, job.device, job.seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=job.lr)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        losses, step_s, loss_tokens = [], [], 0
        feed = batches(loader)
        drain()
        last = time.perf_counter()
        for index in range(job.warmup + job.steps):
            batch = next(feed)
            loss = loss_of(model, batch, job.layout)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            drain()
            now = time.perf_counter()
            losses.append(float(loss.detach()))
            if index >= job.warmup:
                step_s.append(now - last)
                loss_tokens += int(batch["num_loss_tokens"])
            last = now
    return {"status": "ok", "model": job.model, "attn": job.attn, "layout": job.layout,
            "parameters": parameter_count(model), "device": describe_device(job.device),
            "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
            "steps": job.steps, "loss_tokens": loss_tokens, "seconds": sum(step_s),
            "loss_tokens_per_s": loss_tokens / sum(step_s),
            "step_ms_p50": percentile(step_s, 50) * 1e3,
            "step_ms_p90": percentile(step_s, 90) * 1e3,
            "peak_memory_gb": torch.cuda.max_memory_allocated() / 1e9 if cuda else None,
            "first_loss": losses[0], "final_loss": losses[-1]}


def describe_device(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(device) if device.startswith("cuda") else "CPU"


def describe(run: dict[str, Any]) -> str:
    """One line of a run's figures, or its status."""
    if run["status"] != "ok":
        return run["status"]
    memory = "n/a" if run["peak_memory_gb"] is None else f"{run['peak_memory_gb']:.2f} GB"
    return (f"{run['loss_tokens_per_s']:,.0f} loss-target tokens/s, step p50 "
            f"{run['step_ms_p50']:.1f} ms, p90 {run['step_ms_p90']:.1f} ms, peak memory "
            f"{memory}, loss {run['first_loss']:.3f} -> {run['final_loss']:.3f} "
            f"({run['steps']} timed steps, {run['loss_tokens']:,} targets)")
