"""Lightning training fed by datapipe: a LightningDataModule whose loaders are `dp.Loader`
(images: a small CNN) or `dp.TokenLoader` (text: a tiny next-token model). On a CPU, over the
sample that tools/make_sample_data.py makes, an epoch takes seconds:

    python -m tools.make_sample_data sample
    python examples/lightning_train.py sample/images --epochs 2
    python examples/lightning_train.py sample/tokens --epochs 2

The loaders stand where DataLoaders would, and Lightning drives them as it drives DataLoaders:
it sets their epoch (`loader.sampler.set_epoch`), runs its sanity check on the validation
loader, and keeps their position in its checkpoints, so `--resume` continues mid-epoch exactly.
The script never calls `loader.close()`: the workers stop when it ends.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

import lightning as L
import torch
from torch import nn
from torch.nn import functional as F

import datapipe as dp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recording import Recorder, real_ids


class Shards(L.LightningDataModule):
    """Training and validation loaders over one converted dataset (images or text)."""

    def __init__(self, shards: str, batch_size: int, max_tokens: int, workers: int) -> None:
        super().__init__()
        self.shards, self.batch_size, self.max_tokens = shards, batch_size, max_tokens
        self.workers = workers
        self.kind = dp.Dataset(shards).manifest.kind
        self.loaders: dict[str, dp.Loader | dp.TokenLoader] = {}

    def setup(self, stage: str) -> None:
        # Here rather than in __init__: on every rank, once the process group exists (the
        # loaders take rank and world size from it). Made once, kept: workers persist.
        if not self.loaders:
            self.loaders = {"train": self._loader(shuffle=True), "val": self._loader(False)}

    def _loader(self, shuffle: bool) -> dp.Loader | dp.TokenLoader:
        if self.kind == "text":
            return dp.TokenLoader(self.shards, max_tokens=self.max_tokens, shuffle=shuffle,
                                  num_workers=self.workers, seed=0)
        crop = (dp.image.RandomResizedCrop(32) | dp.image.HorizontalFlip() if shuffle
                else dp.image.CenterCrop(32))
        return dp.Loader(self.shards, batch_size=self.batch_size, shuffle=shuffle, seed=0,
                         num_workers=self.workers, transform=crop | dp.image.Normalize())

    def train_dataloader(self) -> dp.Loader | dp.TokenLoader:
        return self.loaders["train"]

    def val_dataloader(self) -> dp.Loader | dp.TokenLoader:
        return self.loaders["val"]


class ImageClassifier(L.LightningModule):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))

    def loss(self, batch: dict) -> torch.Tensor:
        return F.cross_entropy(self.net(batch["image"]), batch["label"])

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        return self.loss(batch)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.log("val_loss", self.loss(batch), batch_size=len(batch["label"]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class NextToken(L.LightningModule):
    """A bigram model over packed batches: enough to show the loop, not a language model."""

    def __init__(self, vocab: int = 257) -> None:
        super().__init__()
        self.embed, self.head = nn.Embedding(vocab, 32), nn.Linear(32, vocab)

    def loss(self, batch: dict) -> torch.Tensor:
        logits = self.head(self.embed(batch["input_ids"].long()))
        return F.cross_entropy(logits, batch["labels"], ignore_index=-100)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        return self.loss(batch)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.log("val_loss", self.loss(batch), batch_size=1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


class RecordBatches(L.Callback):
    """--record: a JSON line per batch (see recording.py), for checking what each epoch saw."""

    def __init__(self, path: str | None, data: Shards) -> None:
        self.recorder, self.data = Recorder(path), data

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs: object,
                           batch: dict, batch_idx: int) -> None:
        self.recorder.batch("train", trainer.current_epoch, batch_idx, real_ids(batch),
                            self.data.loaders["train"].worker_pids)

    def on_validation_batch_end(self, trainer: L.Trainer, module: L.LightningModule,
                                outputs: object, batch: dict, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        stage = "sanity" if trainer.sanity_checking else "val"
        self.recorder.batch(stage, trainer.current_epoch, batch_idx, real_ids(batch),
                            self.data.loaders["val"].worker_pids)


class Preempt(L.Callback):
    """--preempt-after N: save a checkpoint after N training steps, then die the way a preempted
    job does (SIGKILL: no clean-up of any kind). Try --resume on the checkpoint afterwards."""

    def __init__(self, steps: int, checkpoint: str) -> None:
        self.steps, self.checkpoint = steps, checkpoint

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.global_step == self.steps:
            trainer.save_checkpoint(self.checkpoint)
            os.kill(os.getpid(), signal.SIGKILL)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shards", help="a dataset made by `datapipe convert images|text`")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32, help="images per batch")
    parser.add_argument("--max-tokens", type=int, default=4096, help="tokens per text batch")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--limit-train-batches", type=int, default=None)
    parser.add_argument("--record", help="write a JSON line per batch to this file")
    parser.add_argument("--preempt-after", type=int, default=0, metavar="STEPS")
    parser.add_argument("--checkpoint", default="preempted.ckpt", help="for --preempt-after")
    parser.add_argument("--resume", help="a checkpoint to continue from")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(0)
    data = Shards(args.shards, args.batch_size, args.max_tokens, args.workers)
    if data.kind == "text":
        module: L.LightningModule = NextToken()
    else:
        module = ImageClassifier(len(dp.Dataset(args.shards).manifest.classes or ()) or 1000)
    callbacks: list[L.Callback] = [RecordBatches(args.record, data)]
    if args.preempt_after:
        callbacks.append(Preempt(args.preempt_after, args.checkpoint))
    # Token batches per epoch vary with the shuffle; Lightning reads len() once unless told to
    # ask again every epoch (returning the same loader: its workers and position stay).
    reload = 1 if data.kind == "text" else 0
    trainer = L.Trainer(accelerator="auto", devices=1, max_epochs=args.epochs,
                        limit_train_batches=args.limit_train_batches, callbacks=callbacks,
                        reload_dataloaders_every_n_epochs=reload, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(module, datamodule=data, ckpt_path=args.resume)
    print(f"trained {trainer.current_epoch} epochs, {trainer.global_step} steps; "
          f"val_loss {float(trainer.callback_metrics['val_loss']):.3f}")


if __name__ == "__main__":
    main()
