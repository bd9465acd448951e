"""Fine-tune a tiny random Qwen2-VL for a few steps on packed image conversations, on the CPU.

    datapipe convert vlm data.json vlm-data --tokenizer TOKENIZER_FOLDER
    python examples/train_vlm.py vlm-data --steps 20

Each batch from `dp.VLMLoader` goes to the model as it is: `input_ids`, `labels`,
`position_ids` (4, 1, T: the text positions, from which transformers masks attention to each
sample of the packed row, above the three M-RoPE rows), `mm_token_type_ids`, `pixel_values`,
`image_grid_thw`. A real run loads a pretrained model instead (from_pretrained) and the same
tokenizer the data was converted with.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch

import datapipe as dp

MODEL_INPUTS = ("input_ids", "labels", "position_ids", "mm_token_type_ids", "pixel_values",
                "image_grid_thw")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="a dataset made by `datapipe convert vlm`")
    parser.add_argument("--max-tokens", type=int, default=4096, help="tokens a batch")
    parser.add_argument("--max-pixels", type=int, default=128 * 28 * 28,
                        help="an image's largest area (its tokens: area / 28²)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-3)
    return parser.parse_args(argv)


def tiny_qwen2_vl(vocab_size: int, image_token_id: int) -> torch.nn.Module:
    """A Qwen2-VL of a few layers, random weights: no download."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    config = Qwen2VLConfig(
        text_config={"vocab_size": vocab_size, "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "use_cache": False,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                         "mrope_section": [4, 2, 2]},
                     "bos_token_id": None, "eos_token_id": None},
        vision_config={"depth": 2, "embed_dim": 64, "hidden_size": 64, "num_heads": 4,
                       "mlp_ratio": 2},
        image_token_id=image_token_id, video_token_id=image_token_id,
        attn_implementation="sdpa")
    return Qwen2VLForConditionalGeneration(config)


def train(args: argparse.Namespace) -> list[float]:
    torch.manual_seed(0)
    loader = dp.VLMLoader(args.data, args.max_tokens, max_pixels=args.max_pixels,
                          num_workers=args.workers, overflow="drop")
    manifest = dp.Dataset(args.data).manifest
    model = tiny_qwen2_vl(manifest.tokenizer["vocab_size"],
                          manifest.settings["image_token_id"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    losses: list[float] = []
    with loader:
        while len(losses) < args.steps:
            for batch in loader:
                # use_cache=False: with a cache, transformers ignores the packed positions.
                loss = model(**{k: batch[k] for k in MODEL_INPUTS}, use_cache=False).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                losses.append(loss.item())
                print(f"step {len(losses):3d}  loss {loss.item():.4f}  "
                      f"samples {len(batch['index'])}  images {len(batch['image_grid_thw'])}  "
                      f"token efficiency {batch['efficiency']:.3f}")
                if len(losses) == args.steps:
                    break
            loader.set_epoch(loader.epoch + 1)
    return losses


if __name__ == "__main__":
    train(parse_args())
