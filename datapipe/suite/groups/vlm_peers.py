"""The vlm group's runs: datapipe's VLMLoader, and a torch DataLoader whose 2 workers do what
a Qwen2-VL SFT collator does per batch (TRL's, for one): the chat template, the image
processor on PIL-decoded photos, each image placeholder expanded to its tokens, tokenized and
padded, labels masked to the assistant's turns.

A run records samples/s and samples per CPU-second (as the patches group clocks them), and
the padding efficiency: real tokens / tokens computed (datapipe: / max_tokens; torch: / rows
x the batch's longest row), over every batch but each epoch's last.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datapipe.suite.groups.patch_peers import Counted
from datapipe.suite.groups.patch_peers import measure as measure_counted

MAX_TOKENS = 16384
TORCH_BATCH = 16  # samples a padded batch: about what the token budget holds here
IMAGE_PAD = "<|image_pad|>"


@dataclass(frozen=True)
class VLMJob:
    data: str  # the conversations' folder (torch) or the converted dataset (datapipe)
    workers: int
    warmup: int
    epochs: int


def datapipe_batches(job: VLMJob) -> Iterator[Counted]:
    import datapipe

    with datapipe.VLMLoader(job.data, MAX_TOKENS, num_workers=job.workers,
                            overflow="drop") as loader:
        for epoch in range(job.warmup + job.epochs):
            loader.set_epoch(epoch)
            for batch in loader:
                yield epoch, len(batch["index"]), batch["num_real_tokens"], MAX_TOKENS


class Conversations:
    """The LLaVA JSON's records: each one's messages and PIL-decoded images."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)
        self.records = json.loads((self.folder / "data.json").read_text())

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> tuple[list[dict], list[Any]]:
        from PIL import Image

        record = self.records[i]
        names = record.get("image", [])
        names = [names] if isinstance(names, str) else names
        images = []
        for name in names:
            with Image.open(self.folder / "images" / name) as image:
                images.append(image.convert("RGB"))
        return _messages(record), images


def _messages(record: dict) -> list[dict]:
    roles = {"human": "user", "gpt": "assistant", "system": "system"}
    messages = []
    for turn in record["conversations"]:
        pieces = turn["value"].split("<image>")
        items = [{"type": "text", "text": pieces[0]}] if pieces[0] else []
        for piece in pieces[1:]:
            items.append({"type": "image"})
            if piece:
                items.append({"type": "text", "text": piece})
        messages.append({"role": roles[turn["from"]], "content": items})
    return messages


class ProcessorCollate:
    """Qwen2-VL's processing of a batch, in the worker: as Qwen2VLProcessor and an SFT
    collator do it (the processor itself needs torchvision for its video half)."""

    def __init__(self, tokenizer: str) -> None:
        self.tokenizer_path = tokenizer
        self.tok: Any = None

    def _load(self) -> None:
        from transformers import PreTrainedTokenizerFast
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
            Qwen2VLImageProcessorPil,
        )

        config = json.loads((Path(self.tokenizer_path) / "tokenizer_config.json").read_text())
        self.tok = PreTrainedTokenizerFast(
            tokenizer_file=str(Path(self.tokenizer_path) / "tokenizer.json"),
            chat_template=config["chat_template"], pad_token=config["pad_token"])
        self.images = Qwen2VLImageProcessorPil()

    def __call__(self, samples: list[tuple[list[dict], list[Any]]]) -> dict[str, Any]:
        import torch

        if self.tok is None:
            self._load()
        photos = [image for _, images in samples for image in images]
        out = dict(self.images(images=photos, return_tensors="pt")) if photos else {}
        counts = iter((out["image_grid_thw"].prod(-1) // 4).tolist() if photos else [])
        texts = []
        for messages, _ in samples:
            pieces = self.tok.apply_chat_template(messages, tokenize=False).split(IMAGE_PAD)
            texts.append(pieces[0] + "".join(IMAGE_PAD * next(counts) + p
                                             for p in pieces[1:]))
        encoded = self.tok(texts, padding=True, return_tensors="pt", add_special_tokens=False)
        masks = [self.tok.apply_chat_template(m, tokenize=True, return_dict=True,
                                              return_assistant_tokens_mask=True)
                 ["assistant_masks"] for m, _ in samples]
        labels = encoded["input_ids"].masked_fill(encoded["attention_mask"] == 0, -100)
        image_id = self.tok.convert_tokens_to_ids(IMAGE_PAD)
        labels = labels.masked_fill(labels == image_id, -100)
        out.update(encoded, labels=labels, assistant_masks=masks,
                   mm_token_type_ids=(encoded["input_ids"] == image_id).long())
        out["num_tokens"] = torch.tensor(int(encoded["attention_mask"].sum()))
        return out


def torch_batches(job: VLMJob) -> Iterator[Counted]:
    import torch

    data = Conversations(job.data)
    loader = torch.utils.data.DataLoader(
        data, batch_size=TORCH_BATCH, shuffle=True, num_workers=job.workers,
        collate_fn=ProcessorCollate(str(Path(job.data) / "tokenizer")),
        persistent_workers=job.workers > 0)
    for epoch in range(job.warmup + job.epochs):
        for batch in loader:
            rows, width = batch["input_ids"].shape
            yield epoch, rows, int(batch["num_tokens"]), rows * width


def measure(batches: Iterator[Counted], job: VLMJob) -> dict[str, Any]:
    counted = measure_counted(batches, job)  # its "images" are samples here
    return {"samples": counted["images"], "seconds": counted["seconds"],
            "rate": counted["rate"], "cpu_rate": counted["cpu_rate"],
            "efficiency": counted["efficiency"], "start_s": counted["start_s"]}


def measure_datapipe(job: VLMJob) -> dict[str, Any]:
    return measure(datapipe_batches(job), job)


def measure_torch(job: VLMJob) -> dict[str, Any]:
    return measure(torch_batches(job), job)
