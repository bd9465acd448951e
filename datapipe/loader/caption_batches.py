"""Captions collated in the workers: each sample's drawn caption, padded into the batch buffer.

The ids go straight into the shared batch buffer after the images, as (n, L) int64 rows and
their attention mask, so the training process only makes views of them (nothing collated,
nothing pickled per caption). Which caption of a sample is read is `caption_choice(seed,
epoch, index)`: the same in a resumed run, whatever worker builds the batch. A producer whose
images never pass through a batch buffer (DALI's) pads them into a buffer of their own
(`caption_fields`), off the thread that iterates the loader.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from datapipe.format.captions import CAPTION_IDS, CAPTION_LENGTHS
from datapipe.format.concat import ConcatDataset
from datapipe.format.dataset import Dataset
from datapipe.loader.caption_fields import CaptionLayout
from datapipe.sampling.caption_draw import caption_choice

_NONE = np.empty(0, np.int64)
ALIGN = 8  # int64 rows: their region starts on an 8-byte boundary of the buffer


def caption_region(layout: CaptionLayout, capacity: int) -> int:
    """Bytes a buffer for `capacity` samples keeps for ids and mask."""
    return 2 * capacity * layout.context_length * 8


def aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


class CaptionCollator:
    """A worker's reader of the drawn captions, writing them padded into the batch buffer."""

    def __init__(self, dataset: Dataset | ConcatDataset, layout: CaptionLayout,
                 seed: int) -> None:
        self.dataset, self.layout, self.seed = dataset, layout, seed

    def fill(self, epoch: int, indices: np.ndarray, shards: np.ndarray, rows: np.ndarray,
             region: np.ndarray) -> dict[str, Any]:
        """The drawn caption of each sample into `region` (the buffer's caption bytes):
        (n, L) ids, then (n, L) mask. Returns what the batch needs to view them."""
        picked, chosen = self._drawn(epoch, indices, shards, rows)
        width = self.layout.width(max(map(len, picked), default=1))
        picked = [self._fitted(caption, width) for caption in picked]
        n = len(picked)
        ids = region[:n * width * 8].view(np.int64).reshape(n, width)
        mask = region[n * width * 8: 2 * n * width * 8].view(np.int64).reshape(n, width)
        lengths = np.fromiter(map(len, picked), dtype=np.int64, count=n)
        real = np.arange(width) < lengths[:, None]  # one assignment for the whole batch
        ids.fill(self.layout.pad_id)
        if n:
            ids[real] = np.concatenate(picked)
        np.copyto(mask, real)
        return {"caption_width": width, "caption_index": chosen}

    def _drawn(self, epoch: int, indices: np.ndarray, shards: np.ndarray,
               rows: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """Each sample's drawn caption ids (views of the shard's mapping), and which it was."""
        readers = {s: self.dataset.shard(s) for s in set(shards.tolist())}
        places = [(readers[s], r) for s, r in zip(shards.tolist(), rows.tolist(), strict=True)]
        lengths = [reader.payload(CAPTION_LENGTHS, row).tolist() for reader, row in places]
        counts = np.fromiter(map(len, lengths), dtype=np.int64, count=len(lengths))
        chosen = caption_choice(self.seed, epoch, indices, counts)
        picked = []
        for (reader, row), length, choice in zip(places, lengths, chosen.tolist(), strict=True):
            if not length:  # a sample written without captions: an empty row
                picked.append(_NONE)
                continue
            start = sum(length[:choice])
            picked.append(reader.payload(CAPTION_IDS, row)[start:start + length[choice]])
        return picked, chosen

    def _fitted(self, caption: np.ndarray, width: int) -> np.ndarray:
        """A caption cut to `width`, keeping its end-of-text id at the end."""
        if len(caption) <= width:
            return caption
        eos = self.layout.eos_id
        if eos is not None and int(caption[-1]) == eos:
            return np.append(caption[:width - 1], caption[-1:])
        return caption[:width]


def caption_tensors(slot: torch.Tensor, offset: int, meta: dict[str, Any]) -> dict[str, Any]:
    """The batch's caption fields as views of the buffer (no copy)."""
    n, width = meta["count"], meta["caption_width"]
    size = n * width * 8
    ids = slot[offset: offset + size].view(torch.int64).view(n, width)
    mask = slot[offset + size: offset + 2 * size].view(torch.int64).view(n, width)
    return {"input_ids": ids, "attention_mask": mask,
            "caption_index": torch.from_numpy(meta["caption_index"])}


def caption_fields(collator: CaptionCollator, epoch: int, indices: np.ndarray,
                   shards: np.ndarray, rows: np.ndarray, pin_memory: bool = False,
                   ) -> dict[str, Any]:
    """The batch's caption fields in a buffer of their own. Page-locked with `pin_memory`, so
    that a copy to the GPU reads it in place (no staging copy where the batch is handed out)."""
    buffer = torch.empty(caption_region(collator.layout, len(indices)), dtype=torch.uint8,
                         pin_memory=pin_memory)
    filled = collator.fill(epoch, indices, shards, rows, buffer.numpy())
    return caption_tensors(buffer, 0, {"count": len(indices), **filled})


def captions_to_columns(meta: dict[str, Any], buffer: torch.Tensor, offset: int) -> None:
    """A built batch's caption rows (at `offset` of the `buffer` it was built in) moved among
    its columns as fields, for a producer that hands its images out apart from that buffer."""
    if "caption_width" in meta:
        meta["columns"] = {**caption_tensors(buffer, offset, meta), **meta["columns"]}
        del meta["caption_width"], meta["caption_index"]
