"""`datapipe convert vlm`: image conversations -> shards of token ids, loss masks and images.

Each sample is one row: the chat template's ids with ONE placeholder id per image (the
model's image token; how many copies it stands for depends on the image's grid, which the
loader computes from the stored size and its preset), the assistant mask, where the
placeholders are, and the sample's images re-encoded as `convert images` does, end to end
in one bytes cell with each one's size and byte count. One row per sample keeps the loader
simple: a sample's text and images are read from the same place, a text-only sample is a row
with no images, and a plain SFT dataset is the same schema less the image columns.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.format.hashing import hash_bytes
from datapipe.format.schema import Column, token_type_for_vocab
from datapipe.format.writer import rows_nbytes
from datapipe.system import available_cores
from preprocess.chat_template import ChatEncoder
from preprocess.engine import Engine, LocalEngine
from preprocess.image_ops import ImageSettings, RejectedImage, prepare_image
from preprocess.output import ConversionResult, OutputDirectory, OutputOptions
from preprocess.sft_records import Chat
from preprocess.tokenizers import HFTokenizer, load_tokenizer
from preprocess.vlm_records import (
    ImageRef,
    SourceRecord,
    VLMRecord,
    list_files,
    read_records,
)

DEFAULT_IMAGE_TOKEN = "<|image_pad|>"  # Qwen2-VL's and Qwen2.5-VL's
IMAGE_COLUMNS = ("num_images", "image_positions", "image_sizes", "image_nbytes", "images")
SPAN = 64  # samples a task


def vlm_columns(token_type: str) -> tuple[Column, ...]:
    return (Column("tokens", token_type), Column("length", "int32"),
            Column("loss_mask", "uint8[]"), Column("num_images", "int32"),
            Column("image_positions", "int32[]"), Column("image_sizes", "int32[]"),
            Column("image_nbytes", "int64[]"), Column("images", "bytes"))


@dataclass(frozen=True)
class VLMWork:
    """What every worker holds for the whole run."""

    records: tuple[SourceRecord, ...]
    chat: ChatEncoder
    image_id: int
    dtype: np.dtype
    images: ImageSettings


@dataclass
class VLMRows:
    kept: list[int]
    rows: dict[str, list[Any]]
    sizes: list[int]
    rejects: list[tuple[int, str]]


def convert_span(work: VLMWork, span: tuple[int, int]) -> VLMRows:
    """Samples span[0]..span[1]-1, made or rejected: one engine task."""
    result = VLMRows([], {c: [] for c in ("tokens", "length", "loss_mask", *IMAGE_COLUMNS)},
                     [], [])
    for position, item in enumerate(work.records[span[0]:span[1]]):
        outcome = item.record if isinstance(item.record, str) else _sample(work, item.record)
        if isinstance(outcome, str):
            result.rejects.append((position, outcome))
            continue
        result.kept.append(position)
        for name, value in outcome.items():
            result.rows[name].append(value)
    return result


def _sample(work: VLMWork, record: VLMRecord) -> dict[str, Any] | str:
    """One sample's cells, or why it is a reject."""
    encoded = work.chat.encode(Chat(record.messages))
    if isinstance(encoded, str):
        return encoded
    ids, mask = encoded
    if not mask.any():
        return "no assistant tokens (an empty assistant turn): nothing for the loss to count"
    positions = np.flatnonzero(ids == work.image_id).astype(np.int32)
    if len(positions) != len(record.images):
        return (f"the chat template renders {len(positions)} image tokens for "
                f"{len(record.images)} images")
    payloads, sizes = [], []
    for image in record.images:
        made = _image(image, work.images)
        if isinstance(made, str):
            return made
        payloads.append(made[0])
        sizes += made[1:]
    mask[positions] = 0  # an image token is never a target
    return {"tokens": ids.astype(work.dtype), "length": len(ids), "loss_mask": mask,
            "num_images": len(payloads), "image_positions": positions,
            "image_sizes": np.asarray(sizes, np.int32),
            "image_nbytes": np.asarray([len(p) for p in payloads], np.int64),
            "images": b"".join(payloads)}


def _image(image: ImageRef, settings: ImageSettings) -> tuple[bytes, int, int] | str:
    """(payload, height, width) re-encoded as `convert images` does, or a reason naming it."""
    try:
        if image.data is not None:
            return prepare_image(image.data, settings)
        with open(image.path, "rb") as file:
            return prepare_image(file, settings)
    except RejectedImage as exc:
        return f"image {image.name}: {exc}"
    except OSError as exc:
        return f"image {image.name}: unreadable ({exc.strerror or exc})"


def load_chat(tokenizer_spec: str, template: Path | None,
              image_token: str) -> tuple[HFTokenizer, ChatEncoder, int]:
    """The tokenizer, its chat template and the image token's id; refused in one line when
    the tokenizer or template does not know the image token."""
    tokenizer = load_tokenizer(tokenizer_spec)
    if not isinstance(tokenizer, HFTokenizer):
        raise ArgumentError("--tokenizer bytes has no chat template: convert vlm needs a "
                            "Hugging Face tokenizer.json (or a processor's folder)")
    chat = ChatEncoder(tokenizer.path, template)
    image_id = chat.token_id(image_token)
    if image_id is None:
        raise ArgumentError(f"--image-token {image_token!r}: tokenizer {tokenizer_spec!r} has "
                            "no such token (name the model's image token)")
    probe = Chat(({"role": "user", "content": [{"type": "image"}, {"type": "text",
                                                                   "text": "x"}]},
                  {"role": "assistant", "content": [{"type": "text", "text": "y"}]}))
    encoded = chat.encode(probe)
    if isinstance(encoded, str) or int((encoded[0] == image_id).sum()) != 1:
        raise ArgumentError(f"the chat template does not render an image item as "
                            f"{image_token!r} (pass --chat-template FILE, or --image-token)")
    return tokenizer, chat, image_id


def convert_vlm(sources: list[Path], options: OutputOptions, tokenizer_spec: str,
                image_folder: Path | None = None, chat_template: Path | None = None,
                image_token: str = DEFAULT_IMAGE_TOKEN, images: ImageSettings | None = None,
                workers: int | None = None, engine: Engine | None = None,
                progress: Callable[[int, int], None] | None = None) -> ConversionResult:
    """Convert every conversation SRC holds; `progress(done, total)` as samples finish."""
    images = images or ImageSettings(short_side=0)
    engine = engine or LocalEngine(workers or available_cores())
    files = list_files(sources)
    tokenizer, chat, image_id = load_chat(tokenizer_spec, chat_template, image_token)
    records = read_records(files, image_folder)
    columns = vlm_columns(token_type_for_vocab(tokenizer.vocab_size))
    settings = {"text_kind": "vlm", "loss_on": "assistant", "loss_mask": "assistant",
                "chat_template": chat.template_hash, "image_token": image_token,
                "image_token_id": image_id, "images": images.record(),
                "shard_size": options.shard_size}
    fingerprint = hash_bytes(json.dumps({
        "kind": "vlm", "format": options.shard_format, "settings": settings,
        "tokenizer": tokenizer.identity(),
        "inputs": [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files],
    }).encode())
    work = VLMWork(tuple(records), chat, image_id, columns[0].numpy_dtype, images)
    with OutputDirectory(options, "text", columns, fingerprint) as output:
        spans = ((at, min(at + SPAN, len(records)))
                 for at in range(output.resume_from, len(records), SPAN))
        _write(output, records, engine.map_ordered(convert_span, work, spans), progress)
        return output.finish(len(records), settings, stats={},
                             tokenizer=tokenizer.identity())


def _write(output: OutputDirectory, records: list[SourceRecord], spans: Iterator[VLMRows],
           progress: Callable[[int, int], None] | None) -> None:
    index = output.resume_from
    for span in spans:
        for position, reason in span.rejects:
            output.reject(index + position, records[index + position].source, reason)
        output.add_rows([index + p for p in span.kept], span.rows,
                        rows_nbytes(output.columns, span.rows))
        index += len(span.kept) + len(span.rejects)
        if progress is not None:
            progress(index, len(records))
