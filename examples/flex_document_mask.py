"""FlexAttention over TokenLoader's packed batches: a document mask from `seq_idx`.

preset="flex" gives (1, T) `input_ids` and `seq_idx` (int32, the number of the sequence each
token belongs to). The `mask_mod` lets a query attend to an earlier key of its own document
only; `create_block_mask` turns it into the block-sparse mask flex_attention skips work by.
This runs one attention layer over each batch, on the CPU as on a GPU, and checks it against
causal SDPA run on each document alone:

    python examples/flex_document_mask.py TOKENS [--max-tokens 1024] [--batches 3]
"""

from __future__ import annotations

import argparse
import itertools

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import datapipe as dp


def document_causal_mask(seq_idx: torch.Tensor):
    """The mask_mod of a packed row: same document, and not a later token."""
    documents = seq_idx[0]

    def mask_mod(b, h, q_idx, kv_idx):
        return (documents[q_idx] == documents[kv_idx]) & (q_idx >= kv_idx)

    return mask_mod


def attend(batch: dict, heads: int = 4, dim: int = 16, seed: int = 0) -> torch.Tensor:
    """Random q, k, v for the batch's tokens through flex_attention with the document mask."""
    length = batch["input_ids"].shape[1]
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, heads, length, dim, generator=gen) for _ in range(3))
    block_mask = create_block_mask(document_causal_mask(batch["seq_idx"]), None, None, length,
                                   length, device="cpu")
    return flex_attention(q, k, v, block_mask=block_mask), (q, k, v)


def per_document(batch: dict, q: torch.Tensor, k: torch.Tensor,
                 v: torch.Tensor) -> torch.Tensor:
    """The reference: causal SDPA on each document's slice alone."""
    cu = batch["cu_seqlens"].tolist()
    return torch.cat([torch.nn.functional.scaled_dot_product_attention(
        q[..., a:b, :], k[..., a:b, :], v[..., a:b, :], is_causal=True)
        for a, b in itertools.pairwise(cu)], dim=2)


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tokens", help="a text dataset (datapipe convert text)")
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=3)
    args = parser.parse_args(argv)
    worst = 0.0
    with dp.TokenLoader(args.tokens, max_tokens=args.max_tokens, preset="flex") as loader:
        for b, batch in zip(range(args.batches), loader, strict=False):
            out, (q, k, v) = attend(batch, seed=b)
            error = float((out - per_document(batch, q, k, v)).abs().max())
            worst = max(worst, error)
            print(f"batch {b}: {batch['input_ids'].shape[1]} tokens, "
                  f"{len(batch['cu_seqlens']) - 1} documents, max error {error:.2e}")
    return worst


if __name__ == "__main__":
    main()
