"""A tiny ViT trained on packed native-resolution patches from datapipe's PatchLoader.

Each batch is several images' patches back to back (`pixel_values` (sum N, D)), every image at
its own size and shape; attention must stay within an image. On a GPU the batch goes to
PyTorch's `varlen_attn` (torch 2.9 and later) with the batch's `cu_seqlens` and `max_seqlen`
as they are; elsewhere (the CPU) to SDPA with a block-diagonal mask built from `cu_seqlens`.
Positions are NaViT's factorized embeddings, a row's plus a column's, looked up by
`patch_positions`; an image's patches are mean-pooled (by `cu_seqlens`) into its logits.
Random init, CPU, about a minute:

    datapipe convert images PHOTOS DATA --short-side 0
    python examples/train_patches.py DATA [--preset navit] [--max-patches 4096] [--steps 50]
    datapipe profile -- python examples/train_patches.py DATA
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import datapipe as dp


def image_ids(cu_seqlens: torch.Tensor, total: int) -> torch.Tensor:
    """The image of each patch of a packed batch (0, 0, ..., 1, 1, ...)."""
    lengths = torch.diff(cu_seqlens.long())
    return torch.repeat_interleave(torch.arange(len(lengths), device=cu_seqlens.device),
                                   lengths, output_size=total)


def masked_varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            cu_seqlens: torch.Tensor) -> torch.Tensor:
    """(T, heads, dim) attention within each image: SDPA with a block-diagonal mask."""
    ids = image_ids(cu_seqlens, q.shape[0])
    mask = ids[:, None] == ids[None, :]
    out = nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask)
    return out.transpose(0, 1)


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     cu_seqlens: torch.Tensor, max_seqlen: int) -> torch.Tensor:
    """PyTorch's varlen kernel on CUDA where this torch has it, else the masked path."""
    if q.is_cuda:
        try:
            from torch.nn.attention.varlen import varlen_attn
        except ImportError:
            pass
        else:
            return varlen_attn(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen)
    return masked_varlen_attention(q, k, v, cu_seqlens)


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


class PackedViT(nn.Module):
    """Patches of any number of images of any sizes in one sequence, a class per image."""

    def __init__(self, patch_dim: int, classes: int, dim: int = 64, depth: int = 2,
                 heads: int = 4, max_side: int = 4096) -> None:
        super().__init__()
        self.embed = nn.Linear(patch_dim, dim)
        self.rows, self.cols = nn.Embedding(max_side, dim), nn.Embedding(max_side, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, classes))

    def forward(self, pixel_values: torch.Tensor, patch_positions: torch.Tensor,
                cu_seqlens: torch.Tensor, max_seqlen: int) -> torch.Tensor:
        x = self.embed(pixel_values) + self.rows(patch_positions[:, 0]) + \
            self.cols(patch_positions[:, 1])
        for block in self.blocks:
            x = block(x, cu_seqlens, max_seqlen)
        images = len(cu_seqlens) - 1
        ids = image_ids(cu_seqlens, x.shape[0])
        pooled = torch.zeros(images, x.shape[1], device=x.device, dtype=x.dtype)
        pooled.index_add_(0, ids, x)
        return self.head(pooled / torch.diff(cu_seqlens).unsqueeze(1).to(x.dtype))


def train(args: argparse.Namespace) -> list[float]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = dp.PatchLoader(args.data, args.preset, max_patches=args.max_patches,
                            num_workers=args.workers, device=device, flip=True)
    with dp.Dataset(args.data) as ds:
        classes = max(1, int(ds.scalar_range("label")[1] or 0) + 1)
    model = PackedViT(loader.settings.patches.patch_dim, classes).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses, images, started = [], 0, time.perf_counter()
    while len(losses) < args.steps:
        for batch in loader:
            logits = model(batch["pixel_values"], batch["patch_positions"],
                           batch["cu_seqlens"], batch["max_seqlen"])
            loss = nn.functional.cross_entropy(logits, batch["label"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            images += len(batch["index"])
            if len(losses) % 10 == 0 or len(losses) == args.steps:
                print(f"step {len(losses)}: loss {losses[-1]:.3f}, "
                      f"{images / (time.perf_counter() - started):.0f} images/s, "
                      f"patch efficiency {loader.efficiency:.3f}")
            if len(losses) == args.steps:
                break
        loader.set_epoch(loader.epoch + 1)
    loader.close()
    return losses


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="a datapipe image dataset (converted with --short-side 0)")
    parser.add_argument("--preset", default="navit", choices=["navit", "qwen2_vl"])
    parser.add_argument("--max-patches", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    train(parse_args(argv))


if __name__ == "__main__":
    main()
