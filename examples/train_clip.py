"""A tiny CLIP-style model trained one epoch on images and their captions, on the CPU.

It makes a few captioned images (coloured shapes, each with a sidecar `.txt` as kohya and
diffusers users keep them), converts them with their captions tokenized once
(`datapipe convert images --tokenizer`), then trains a small image tower and text tower
(random init, nothing downloaded) with CLIP's contrastive loss on batches of `image`,
`input_ids` and `attention_mask` that the loader's workers collate:

    python examples/train_clip.py [--out clip-demo] [--images 96] [--preset openclip]
    python examples/train_clip.py --shards SHARDS --tokenizer TOKENIZER   # your own data
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw
from torch import nn

import datapipe as dp

COLOURS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 70, 220),
           "yellow": (230, 210, 40)}
SHAPES = ("square", "circle", "triangle")


def make_captioned_images(folder: Path, count: int) -> Path:
    """`count` images of a coloured shape, each with its caption beside it (`img.txt`), in an
    image folder (one class folder, `shapes`); returns the folder."""
    images = folder / "images" / "shapes"
    images.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        colour, shape = list(COLOURS)[n % len(COLOURS)], SHAPES[n // len(COLOURS) % len(SHAPES)]
        image = Image.new("RGB", (64 + n % 5 * 8, 64), (245, 245, 245))
        draw, box = ImageDraw.Draw(image), (12 + n % 7, 10, 50 + n % 7, 50)
        if shape == "square":
            draw.rectangle(box, fill=COLOURS[colour])
        elif shape == "circle":
            draw.ellipse(box, fill=COLOURS[colour])
        else:
            draw.polygon([(box[0], box[3]), (box[2], box[3]), ((box[0] + box[2]) // 2, box[1])],
                         fill=COLOURS[colour])
        image.save(images / f"{n:04d}.jpg", quality=90)
        (images / f"{n:04d}.txt").write_text(f"a {colour} {shape}\n")
    return images.parent


def convert(src: Path, out: Path, tokenizer: str) -> None:
    """The images and their captions into shards, as a user runs it."""
    subprocess.run([sys.executable, "-m", "datapipe.cli", "convert", "images", str(src),
                    str(out), "--short-side", "64", "--tokenizer", tokenizer, "--overwrite"],
                   check=True)


class TextTower(nn.Module):
    """Token embeddings, one transformer layer, the end-of-text position pooled (as CLIP's)."""

    def __init__(self, vocab: int, context: int, width: int = 64) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Parameter(torch.randn(context, width) * 0.01)
        self.layer = nn.TransformerEncoderLayer(width, 4, 2 * width, batch_first=True)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.tokens(input_ids) + self.positions[:input_ids.shape[1]]
        x = self.layer(x, src_key_padding_mask=attention_mask == 0)
        last = attention_mask.sum(1) - 1  # the end-of-text id closes every caption
        return x[torch.arange(len(x)), last]


class TinyClip(nn.Module):
    def __init__(self, vocab: int, context: int, embed: int = 32) -> None:
        super().__init__()
        self.image = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, embed))
        self.text = TextTower(vocab, context)
        self.text_projection = nn.Linear(64, embed)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, image: torch.Tensor, input_ids: torch.Tensor,
                attention_mask: torch.Tensor) -> torch.Tensor:
        """CLIP's symmetric contrastive loss over the batch."""
        images = F.normalize(self.image(image), dim=-1)
        texts = F.normalize(self.text_projection(self.text(input_ids, attention_mask)), dim=-1)
        logits = self.logit_scale.exp() * images @ texts.T
        target = torch.arange(len(logits))
        return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2


def train(shards: Path, preset: str, batch_size: int, workers: int) -> list[float]:
    """One epoch; returns the loss of each step."""
    transform = (dp.image.RandomResizedCrop(48, scale=(0.6, 1.0)) | dp.image.HorizontalFlip()
                 | dp.image.Normalize())
    with dp.Dataset(shards) as ds:
        vocab = ds.manifest.tokenizer["vocab_size"]
    losses = []
    with dp.Loader(shards, batch_size=batch_size, num_workers=workers, transform=transform,
                   captions=preset, drop_last=True) as loader:
        model = TinyClip(vocab, loader.captions.context_length)
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
        for batch in loader:  # image, input_ids, attention_mask, caption_index, ...
            loss = model(batch["image"], batch["input_ids"], batch["attention_mask"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("clip-demo"))
    parser.add_argument("--images", type=int, default=96)
    parser.add_argument("--shards", type=Path, default=None,
                        help="a captioned dataset already converted (skips making one)")
    parser.add_argument("--tokenizer", default="bytes",
                        help="a tokenizer.json, or 'bytes' [default]; what convert takes")
    parser.add_argument("--preset", choices=["openclip", "clip", "siglip"], default="openclip")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    shards = args.shards
    if shards is None:
        shards = args.out / "shards"
        convert(make_captioned_images(args.out, args.images), shards, args.tokenizer)
    torch.manual_seed(0)
    losses = train(shards, args.preset, args.batch_size, args.workers)
    print(f"trained 1 epoch, {len(losses)} steps: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    return losses


if __name__ == "__main__":
    main()
