"""What the loaders check on each sample they read, done over whole shards by `datapipe verify`.

A loader checks a shard's structure and scalars when it opens it (integrity.py), and the
samples' payloads as its workers read them: token ids below the manifest's vocabulary size, a
msgpack record against its length column, an image's stored size against its width and
height. Verify runs these over every row, so that a dataset it calls intact is one no reader
refuses. An image's header is read, not its pixels: only a full decode would find a JPEG
damaged further in, and a hash mismatch already finds damage made after conversion.
"""

from __future__ import annotations

import io

import numpy as np

from datapipe.format.manifest import Manifest
from datapipe.format.shard_reader import ShardReader


def check_samples(reader: ShardReader, manifest: Manifest) -> None:
    """Raise the DataError a loader would raise on the first sample of the shard it refuses."""
    if "tokens" in reader.columns:
        _check_tokens(reader, manifest)
    if "image" in reader.columns and {"height", "width"} <= set(reader.columns):
        _check_images(reader, manifest)
    for column in reader.columns.values():
        if column.shape is not None and reader.payload_lengths(column.name) is None:
            for row in range(reader.num_rows):  # a msgpack record is checked as it is read
                reader.cell(column.name, row)


def _check_tokens(reader: ShardReader, manifest: Manifest) -> None:
    vocab = (manifest.tokenizer or {}).get("vocab_size")
    vocab = vocab if isinstance(vocab, int) and not isinstance(vocab, bool) else None
    lengths = reader.scalar("length") if "length" in reader.columns else None
    for row in range(reader.num_rows):
        ids = reader.payload("tokens", row)  # a msgpack record is decoded and checked here
        if lengths is not None and len(ids) != lengths[row]:
            raise reader.corrupt(row, f"holds {len(ids)} tokens, its length column says "
                                      f"{lengths[row]}")
        if vocab is not None and len(ids) and ids.max() >= vocab:
            at = int(np.argmax(ids >= vocab))
            raise reader.corrupt(row, f"token {at} is id {ids[at]}, not below the vocabulary "
                                      f"size {vocab}")


def _check_images(reader: ShardReader, manifest: Manifest) -> None:
    raw = manifest.settings.get("encoding", "jpeg") == "raw"
    heights, widths = reader.scalar("height"), reader.scalar("width")
    for row in range(reader.num_rows):
        payload = reader.payload("image", row)
        height, width = int(heights[row]), int(widths[row])
        if raw:
            if len(payload) != height * width * 3:
                raise reader.corrupt(row, f"raw image holds {len(payload)} bytes, expected "
                                          f"{height}x{width}x3")
            continue
        found = _image_size(reader, row, payload)
        if found != (width, height):
            raise reader.corrupt(row, f"the image is {found[0]}x{found[1]} pixels, but the "
                                      f"shard's width and height say {width}x{height}")


def _image_size(reader: ShardReader, row: int, payload: np.ndarray) -> tuple[int, int]:
    """(width, height) from the image's header."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(payload.tobytes())) as image:
            return image.size
    except Exception as exc:  # untrusted bytes: any failure of the parser names the sample
        raise reader.corrupt(row, f"not a readable image ({type(exc).__name__}: {exc})") \
            from None
