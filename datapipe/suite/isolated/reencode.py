"""What the convert group's peers run as their users would write it: read the photos people
hold (WebDataset tars, Hugging Face Parquet) and re-encode each the straightforward way. Beside
clock.py so that a peer in a venv of its own (Streaming's MDSWriter) runs the very same code:
imports PIL, webdataset and pyarrow, never datapipe."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SHORT_SIDE = 256
QUALITY = 90


def plain_transform(payload: bytes, label: int) -> dict[str, Any]:
    """One photo the straightforward way: full decode, orient, RGB, resize, re-encode."""
    from PIL import Image, ImageOps

    with Image.open(io.BytesIO(payload)) as opened:
        image = ImageOps.exif_transpose(opened).convert("RGB")
    scale = SHORT_SIDE / min(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    buffer = io.BytesIO()
    image.resize(size, Image.Resampling.BICUBIC).save(buffer, "JPEG", quality=QUALITY)
    return {"image": buffer.getvalue(), "label": label}


def tar_samples(tar: str) -> Iterator[dict[str, Any]]:
    """Every sample of one tar, transformed: what a LitData user's fn yields per input."""
    import webdataset as wds

    for sample in wds.WebDataset(tar, shardshuffle=False):
        yield plain_transform(sample["jpg"], int(sample["cls"]))


def parquet_samples(item: tuple[str, int]) -> Iterator[dict[str, Any]]:
    """Every row of one row group of one Parquet file, transformed."""
    import pyarrow.parquet as pq

    path, group = item
    table = pq.ParquetFile(path).read_row_group(group, columns=["image", "label"])
    for image, label in zip(table.column("image").to_pylist(),
                            table.column("label").to_pylist(), strict=True):
        yield plain_transform(image["bytes"], label)


def parquet_row_groups(src: Path) -> list[tuple[str, int]]:
    import pyarrow.parquet as pq

    return [(str(path), group) for path in sorted(src.glob("*.parquet"))
            for group in range(pq.ParquetFile(path).num_row_groups)]
