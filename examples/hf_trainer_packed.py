"""Hugging Face `Trainer` fed by datapipe's TokenLoader: padding-free batches, preset="hf".

The "hf" preset gives what transformers' `DataCollatorWithFlattening(return_flash_attn_kwargs=
True, return_seq_idx=True)` gives: (1, T) `input_ids`, `position_ids` that restart at each
document (eager and sdpa attention keep documents apart by them; flash attention reads
`cu_seq_lens_q/k`), and `labels` in HF's convention (unshifted, -100 at each document's first
token; the model shifts), and `use_cache=False`, so that a model built with its config's
default `use_cache=True` keeps the documents apart. The Trainer counts the loss targets
itself, the same number as the batch's `num_loss_tokens`. A tiny random Llama, a few steps on
the CPU:

    datapipe convert text corpus.txt tokens/ --tokenizer bytes --append-eos
    python examples/hf_trainer_packed.py tokens/ [--steps 5] [--max-tokens 1024]
"""

from __future__ import annotations

import argparse
import tempfile
from typing import Any

import torch
import transformers

import datapipe as dp


class TokenLoaderTrainer(transformers.Trainer):
    """A Trainer that iterates a TokenLoader instead of building a DataLoader: batches are
    already made (and sized by tokens, not by samples)."""

    def __init__(self, *args: Any, loader: dp.TokenLoader, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loader = loader

    def get_train_dataloader(self) -> dp.TokenLoader:
        return self.loader


def tiny_llama(vocab_size: int, max_positions: int) -> transformers.LlamaForCausalLM:
    config = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
        attn_implementation="sdpa")
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tokens", help="a text dataset (datapipe convert text)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=1024, help="tokens per batch")
    args = parser.parse_args(argv)
    with dp.Dataset(args.tokens) as ds:
        vocab_size = int(ds.manifest.tokenizer["vocab_size"])
    with dp.TokenLoader(args.tokens, max_tokens=args.max_tokens, preset="hf") as loader, \
            tempfile.TemporaryDirectory() as out:
        training = transformers.TrainingArguments(
            output_dir=out, max_steps=args.steps, learning_rate=1e-3, logging_steps=1,
            save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True)
        trainer = TokenLoaderTrainer(model=tiny_llama(vocab_size, args.max_tokens),
                                     args=training, loader=loader)
        trainer.train()
        losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
        print(f"trained {len(losses)} steps on {loader.loss_tokens_seen:,} loss targets: "
              f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    return losses


if __name__ == "__main__":
    main()
