"""A small causal-LM training run fed by datapipe's TokenLoader (packed, padding-free).

A packed batch is its documents back to back, and attention must not cross from one into the
next. On a GPU the batch goes to a varlen attention kernel that takes `cu_seqlens` as it is:
PyTorch's own `torch.nn.attention.varlen.varlen_attn` where this torch has it (2.9 and later),
else flash-attn's `flash_attn_varlen_func`, else the masked path. The masked path (the CPU's)
is SDPA with a block-diagonal causal mask built from `cu_seqlens`.

--compare-padded then trains the same model size again on layout="padded" batches (rows padded
to their longest document; SDPA with a causal and padding mask) until it has seen as many real
tokens, and compares tokens/s. Runs on CPU in about a minute:

    python examples/train_text.py TOKENS [--max-tokens 4096] [--steps 100] [--compare-padded]
    datapipe profile -- python examples/train_text.py TOKENS

--model trains a transformers Llama instead (random init, built here: no download): "tiny" for
the CPU, "llama-134m" or "llama-355m" (their parameter counts at a 32,000-token vocabulary) in
bfloat16 on a GPU, once per attention implementation of --attn (HF's attn_implementation:
flash_attention_2, sdpa, flex_attention, eager). Packed batches come from preset="hf"
(padding-free), padded ones (--compare-padded) from layout="padded" with HF's labels, the same
number of steps each; every run reports loss-target tokens/s (`num_loss_tokens`), step time
p50/p90, peak GPU memory and its losses. An implementation this machine lacks (flash_attn not
installed, flex_attention without CUDA) is a "skipped" line, not an error:

    python examples/train_text.py TOKENS --model llama-134m --max-tokens 8192 --compare-padded
    python examples/train_text.py TOKENS --model tiny --attn sdpa eager --compare-padded
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Any

import torch
from torch import nn

import datapipe as dp
from datapipe.suite.groups import hf_train_peers as hf  # the gpu suite's hf_train run

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


# ---------------------------------------------------------------- attention


def causal_kwargs(varlen_attn: Callable[..., Any]) -> dict[str, Any] | None:
    """How this torch's `varlen_attn` is asked for causal attention: `window_size=(-1, 0)`
    (newer releases), `is_causal=True` (2.9, 2.10), or None if it takes neither."""
    parameters = inspect.signature(varlen_attn).parameters
    if "window_size" in parameters:
        return {"window_size": (-1, 0)}
    if "is_causal" in parameters:
        return {"is_causal": True}
    return None


def _torch_varlen() -> Callable[..., Any] | None:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:  # torch < 2.9
        return None
    return varlen_attn if causal_kwargs(varlen_attn) is not None else None


def varlen_backend(device: torch.device) -> str:
    """Where packed batches' attention runs: "torch" (varlen_attn), "flash-attn" or "masked"."""
    if device.type != "cuda":
        return "masked"
    if _torch_varlen() is not None:
        return "torch"
    return "flash-attn" if find_spec("flash_attn") is not None else "masked"


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                     max_seqlen: int, backend: str = "masked") -> torch.Tensor:
    """Causal attention that never crosses a document boundary. q, k, v: (tokens, heads, dim);
    the varlen kernels want them in half precision (autocast gives that)."""
    if backend == "torch":
        varlen_attn = _torch_varlen()
        return varlen_attn(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                           **causal_kwargs(varlen_attn))
    if backend == "flash-attn":
        from flash_attn import flash_attn_varlen_func

        return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                                      causal=True)
    return masked_varlen_attention(q, k, v, cu_seqlens)


def masked_varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            cu_seqlens: torch.Tensor) -> torch.Tensor:
    """The packed batch as one sequence, with a block-diagonal causal mask."""
    n = q.shape[0]
    doc = torch.repeat_interleave(torch.arange(len(cu_seqlens) - 1, device=q.device),
                                  torch.diff(cu_seqlens.long()))
    allowed = (doc[:, None] == doc[None, :]) & torch.ones(n, n, dtype=torch.bool,
                                                          device=q.device).tril()
    out = nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=allowed)
    return out.transpose(0, 1)


def padded_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     attention_mask: torch.Tensor) -> torch.Tensor:
    """q, k, v: (rows, width, heads, dim); attention_mask (rows, width) is 1 on real tokens.
    Causal within each row, never attending to padding (padding still costs compute)."""
    width = q.shape[1]
    causal = torch.ones(width, width, dtype=torch.bool, device=q.device).tril()
    allowed = causal & attention_mask.bool()[:, None, None, :]
    out = nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=allowed)
    return out.transpose(1, 2)


# ---------------------------------------------------------------- the model


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, attend: Attend) -> torch.Tensor:
        """x: (tokens, dim) packed, or (rows, width, dim) padded."""
        qkv = self.qkv(self.norm1(x)).view(*x.shape[:-1], 3, self.heads, -1)
        q, k, v = qkv.unbind(-3)
        x = x + self.proj(attend(q, k, v).flatten(-2))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, dim: int = 128, layers: int = 2, heads: int = 4,
                 max_positions: int = 8192, backend: str = "masked") -> None:
        super().__init__()
        self.backend = backend  # where packed batches' attention runs (varlen_backend)
        self.embed, self.pos = nn.Embedding(vocab, dim), nn.Embedding(max_positions, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, batch: dict) -> torch.Tensor:
        """Logits for a packed batch (input_ids 1-D, cu_seqlens) or a padded one (input_ids
        rows x width, attention_mask)."""
        ids = batch["input_ids"]
        if ids.dim() == 1:
            positions = batch["position_ids"]
            attend = functools.partial(varlen_attention, cu_seqlens=batch["cu_seqlens"],
                                       max_seqlen=batch["max_seqlen"], backend=self.backend)
        else:
            positions = torch.arange(ids.shape[1], device=ids.device)
            attend = functools.partial(padded_attention, attention_mask=batch["attention_mask"])
        x = self.embed(ids) + self.pos(positions)
        for block in self.blocks:
            x = block(x, attend)
        return self.head(x)


# ---------------------------------------------------------------- training


@dataclass
class Run:
    layout: str
    steps: int = 0
    tokens: int = 0  # real tokens after the first (warm-up) step
    seconds: float = 0.0  # from the end of the first step
    efficiency: float = 1.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def train(loader: dp.TokenLoader, model: TinyLM, steps: int, until_tokens: int = 0) -> Run:
    """`steps` steps, or with `until_tokens` as many as it takes to see that many real tokens
    after the first step; the first step (warm-up: kernels, allocator) is not timed."""
    device = loader.device
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    run, started = Run(loader.layout), 0.0

    def finished() -> bool:
        return run.steps > 1 and (run.tokens >= until_tokens if until_tokens
                                  else run.steps >= steps)

    for epoch in range(1 << 30):
        if finished():
            break
        if len(loader) == 0:
            raise dp.DataError(f"{loader.path}: not one batch in an epoch")
        loader.set_epoch(epoch)
        for batch in loader:
            loss = step(model, optimizer, batch, device)
            run.steps += 1
            if run.steps == 1:
                _synchronize(device)
                started = time.perf_counter()
            else:
                run.tokens += batch["num_real_tokens"]
            if run.steps % 10 == 0:
                print(f"{run.layout} step {run.steps}: loss {loss.item():.3f} "
                      f"(perplexity {math.exp(min(loss.item(), 20)):.1f})", flush=True)
            if finished():
                break
    _synchronize(device)
    run.seconds, run.efficiency = time.perf_counter() - started, loader.efficiency
    return run


def step(model: TinyLM, optimizer: torch.optim.Optimizer, batch: dict,
         device: torch.device) -> torch.Tensor:
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" \
        else contextlib.nullcontext()
    with autocast:  # the varlen kernels take half precision only
        logits = model(batch)
        loss = nn.functional.cross_entropy(logits.flatten(0, -2), batch["labels"].flatten(),
                                           ignore_index=-100)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_loader(args: argparse.Namespace, layout: str) -> dp.TokenLoader:
    return dp.TokenLoader(args.tokens, max_tokens=args.max_tokens, layout=layout,
                          pad_to_multiple_of=8, device=args.device)


def run_layout(args: argparse.Namespace, layout: str, until_tokens: int = 0) -> Run:
    """One training run on `layout` batches, with a fresh model of the one size."""
    loader = make_loader(args, layout)
    vocab = dp.Dataset(args.tokens).manifest.tokenizer["vocab_size"]
    torch.manual_seed(0)
    model = TinyLM(vocab, max_positions=args.max_tokens,
                   backend=varlen_backend(loader.device)).to(loader.device)
    try:
        return train(loader, model, args.steps, until_tokens)
    finally:
        loader.close()


def describe(run: Run, backend: str) -> str:
    attention = f"varlen attention: {backend}" if run.layout == "packed" else "SDPA, masked"
    return (f"{run.layout}: trained {run.steps} steps on {run.tokens:,} real tokens (after the "
            f"first step) in {run.seconds:.1f} s: {run.tokens_per_s:,.0f} tokens/s, padding "
            f"efficiency {run.efficiency:.3f} ({attention})")


# ---------------------------------------------------------------- a transformers Llama


def hf_job(args: argparse.Namespace, attn: str, layout: str) -> hf.TrainJob:
    """The first step untimed, as for the model above."""
    return hf.TrainJob(args.tokens, model=args.model, attn=attn, layout=layout,
                       max_tokens=args.max_tokens, steps=args.steps - 1, warmup=1,
                       device=args.device)


def run_hf(args: argparse.Namespace) -> None:
    """Per attention implementation: packed, then (--compare-padded) padded, same steps."""
    layouts = ("packed", "padded") if args.compare_padded else ("packed",)
    if args.compare_padded:  # a document too long to pad says so before training
        hf.make_loader(hf_job(args, "sdpa", "padded")).close()
    counted = False
    for attn in args.attn:
        runs = {}
        for layout in layouts:
            runs[layout] = run = hf.train(hf_job(args, attn, layout))
            if run["status"] == "ok" and not counted:
                print(f"{args.model}: {run['parameters']:,} parameters, {run['dtype']}, on "
                      f"{run['device']}", flush=True)
                counted = True
            print(f"{layout} ({attn}): {hf.describe(run)}", flush=True)
        if all(run["status"] == "ok" for run in runs.values()) and len(runs) == 2:
            ratio = runs["packed"]["loss_tokens_per_s"] / runs["padded"]["loss_tokens_per_s"]
            print(f"packed / padded ({attn}): {ratio:.2f}x the loss-target tokens/s",
                  flush=True)


# ---------------------------------------------------------------- the command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tokens", help="a text dataset made by `datapipe convert text`")
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--compare-padded", action="store_true",
                        help="then train on padded batches to as many real tokens, and compare")
    parser.add_argument("--model", choices=("own", *hf.MODELS), default="own",
                        help="own: this script's model; else a transformers Llama")
    parser.add_argument("--attn", nargs="+", choices=hf.ATTENTIONS,
                        help="HF's attention implementations to train with, one run each "
                        "(default: flash_attention_2 sdpa flex_attention)")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is not timed)")
    if args.attn and args.model == "own":
        parser.error("--attn chooses a transformers model's attention: give --model "
                     f"{' | '.join(hf.MODELS)} with it")
    args.attn = args.attn or [a for a in hf.ATTENTIONS if a != "eager"]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.model != "own":
        run_hf(args)
        return
    if args.compare_padded:
        make_loader(args, "padded").close()  # a document too long to pad says so before training
    packed = run_layout(args, "packed")
    backend = varlen_backend(torch.device(args.device))
    print(describe(packed, backend), flush=True)
    if args.compare_padded:
        padded = run_layout(args, "padded", until_tokens=packed.tokens)
        print(describe(padded, backend), flush=True)
        print(f"packed / padded: {packed.tokens_per_s / padded.tokens_per_s:.2f}x the tokens/s, "
              "same model, same real tokens", flush=True)


if __name__ == "__main__":
    try:
        main()
    except dp.DatapipeError as exc:  # a bad argument or dataset: one line, not a traceback
        sys.exit(f"train_text.py: error: {exc}")
