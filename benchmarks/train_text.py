"""A small causal-LM training run fed by datapipe's TokenLoader (packed, padding-free).

On CPU the packed batch is one sequence with a block-diagonal causal mask built from
`cu_seqlens`; on a GPU with flash-attn installed the same batch goes through
`flash_attn_varlen_func`, which takes `cu_seqlens` directly. Runs on CPU in about a minute:

    python benchmarks/train_text.py TOKENS [--max-tokens 4096] [--steps 100]
    datapipe profile -- python benchmarks/train_text.py TOKENS
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import torch
from torch import nn

import datapipe as dp


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                     max_seqlen: int) -> torch.Tensor:
    """Causal attention that never crosses a document boundary. q, k, v: (tokens, heads, dim)."""
    if q.is_cuda:
        try:
            from flash_attn import flash_attn_varlen_func

            return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                                          causal=True)
        except ImportError:
            pass
    n = q.shape[0]
    doc = torch.repeat_interleave(torch.arange(len(cu_seqlens) - 1, device=q.device),
                                  torch.diff(cu_seqlens.long()))
    allowed = (doc[:, None] == doc[None, :]) & torch.ones(n, n, dtype=torch.bool,
                                                          device=q.device).tril()
    out = nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=allowed)
    return out.transpose(0, 1)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int) -> torch.Tensor:
        q, k, v = self.qkv(self.norm1(x)).view(x.shape[0], 3, self.heads, -1).unbind(1)
        x = x + self.proj(varlen_attention(q, k, v, cu_seqlens, max_seqlen).flatten(1))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, dim: int = 128, layers: int = 2, heads: int = 4,
                 max_positions: int = 8192) -> None:
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, dim), nn.Embedding(max_positions, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, batch: dict) -> torch.Tensor:
        x = self.embed(batch["input_ids"]) + self.pos(batch["position_ids"])
        for block in self.blocks:
            x = block(x, batch["cu_seqlens"], batch["max_seqlen"])
        return self.head(x)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tokens", help="a text dataset made by `datapipe convert text`")
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    loader = dp.TokenLoader(args.tokens, max_tokens=args.max_tokens, layout="packed",
                            pad_to_multiple_of=8, device=args.device)
    device = loader.device
    vocab = dp.Dataset(args.tokens).manifest.tokenizer["vocab_size"]
    model = TinyLM(vocab, max_positions=args.max_tokens).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    started, tokens, step, epoch = time.perf_counter(), 0, 0, 0
    while step < args.steps:
        loader.set_epoch(epoch)
        for batch in loader:
            logits = model(batch)
            loss = nn.functional.cross_entropy(logits, batch["labels"], ignore_index=-100)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            tokens, step = tokens + batch["num_real_tokens"], step + 1
            if step % 10 == 0:
                print(f"step {step}: loss {loss.item():.3f} "
                      f"(perplexity {math.exp(min(loss.item(), 20)):.1f})", flush=True)
            if step >= args.steps:
                break
        epoch += 1
    elapsed = time.perf_counter() - started
    loader.close()
    print(f"trained {step} steps on {tokens:,} real tokens in {elapsed:.1f} s: "
          f"{tokens / elapsed:,.0f} tokens/s, padding efficiency {loader.efficiency:.3f}")


if __name__ == "__main__":
    try:
        main()
    except dp.DatapipeError as exc:  # a bad argument or dataset: one line, not a traceback
        sys.exit(f"train_text.py: error: {exc}")
