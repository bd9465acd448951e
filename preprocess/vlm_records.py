"""Image conversations as `datapipe convert vlm` reads them, each checked into a `VLMRecord`
(or the reason it is a reject).

Two layouts. LLaVA's JSON: a list of `{"image": "a.jpg" (or a list, or none),
"conversations": [{"from": "human", "value": "<image>\\n..."}, {"from": "gpt", ...}]}`, the
images relative to an image folder. Hugging Face datasets' and TRL's `messages` + `images`
(JSONL or Parquet): `{"messages": [{"role": "user", "content": [{"type": "image"}, {"type":
"text", "text": "..."}]}, ...], "images": ["a.jpg", ...]}`, a content a string or a list, an
image a path or Parquet's `{"bytes": ..., "path": ...}`. Either way a `<image>` tag in a text
stands for the next image, and the conversation becomes the chat template's messages with
`{"type": "image"}` items, which the template renders as the model's image placeholder.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datapipe.errors import ArgumentError, DataError
from preprocess.sft_records import ROLES, json_kind

IMAGE_TAG = "<image>"
LLAVA_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
               "system": "system"}
SUFFIXES = (".json", ".jsonl", ".ndjson", ".parquet")


@dataclass(frozen=True)
class ImageRef:
    """One image of a sample: a file (`path`), or bytes a Parquet cell holds (`data`)."""

    name: str  # as rejects name it
    path: Path | None = None
    data: bytes | None = None


@dataclass(frozen=True)
class VLMRecord:
    messages: tuple[dict[str, Any], ...]  # content: a list of image and text items
    images: tuple[ImageRef, ...]


@dataclass(frozen=True)
class SourceRecord:
    """An input as the rejects list names it, and what it holds."""

    source: str  # "file:number"
    record: VLMRecord | str  # or why it is a reject


def read_records(files: list[Path], image_folder: Path | None) -> list[SourceRecord]:
    """Every record of every file, in order; images relative to `image_folder` (default:
    each file's own folder)."""
    records: list[SourceRecord] = []
    for path in files:
        folder = image_folder or path.parent
        for number, raw in _raw_records(path):
            where = f"{path}:{number}"
            records.append(SourceRecord(where, parse_record(raw, folder)))
    return records


def list_files(sources: list[Path]) -> list[Path]:
    """The JSON, JSONL and Parquet files SRC names (a folder: those in it, sorted)."""
    files: list[Path] = []
    for source in sources:
        if source.is_dir():
            files += sorted(p for p in source.iterdir() if p.suffix.lower() in SUFFIXES)
        elif source.is_file():
            if source.suffix.lower() not in SUFFIXES:
                raise ArgumentError(f"SRC {source}: not a .json, .jsonl or .parquet file")
            files.append(source)
        else:
            raise ArgumentError(f"SRC {source}: no such file or folder")
    if not files:
        raise ArgumentError("SRC holds no .json, .jsonl or .parquet file")
    return files


def _raw_records(path: Path) -> Iterator[tuple[int, Any]]:
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            yield from _parquet_rows(path)
        elif suffix == ".json":
            value = json.loads(path.read_text(encoding="utf-8-sig"))
            if not isinstance(value, list):
                raise DataError(f"{path}: holds {json_kind(value)}, not a list of records")
            yield from enumerate(value, 1)
        else:
            with open(path, encoding="utf-8-sig") as file:
                for number, line in enumerate(file, 1):
                    if line.strip():
                        yield number, _json_line(line)
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: unreadable ({exc})") from None
    except ValueError as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from None


def _json_line(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError as exc:
        return f"not valid JSON ({exc})"


def _parquet_rows(path: Path) -> Iterator[tuple[int, Any]]:
    import pyarrow.parquet as pq

    number = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=256):
        for row in batch.to_pylist():
            number += 1
            yield number, row


def parse_record(raw: Any, folder: Path) -> VLMRecord | str:
    """A record of either layout, checked; or why it is a reject."""
    if isinstance(raw, str):
        return raw
    if not isinstance(raw, dict):
        return f"{json_kind(raw)}, not an object"
    if "conversations" in raw:
        messages = _llava_messages(raw["conversations"])
        images = raw.get("image", raw.get("images"))
    elif "messages" in raw:
        messages = _hf_messages(raw["messages"])
        images = raw.get("images")
    else:
        return "no field 'conversations' (LLaVA) nor 'messages'"
    if isinstance(messages, str):
        return messages
    refs = _image_refs(images, folder)
    if isinstance(refs, str):
        return refs
    return _checked(messages, refs)


def _llava_messages(turns: Any) -> list[dict[str, Any]] | str:
    if not isinstance(turns, list):
        return f"field 'conversations' is {json_kind(turns)}, not an array"
    messages = []
    for number, turn in enumerate(turns, 1):
        if not isinstance(turn, dict):
            return f"turn {number}: {json_kind(turn)}, not an object"
        role, value = turn.get("from"), turn.get("value")
        if role not in LLAVA_ROLES:
            return f"turn {number}: unknown 'from' {role!r} (human, gpt or system)"
        if not isinstance(value, str):
            return f"turn {number}: value is {json_kind(value)}, not a string"
        messages.append({"role": LLAVA_ROLES[role], "content": _split_tags(value)})
    return messages


def _hf_messages(raw: Any) -> list[dict[str, Any]] | str:
    if not isinstance(raw, list):
        return f"field 'messages' is {json_kind(raw)}, not an array"
    messages = []
    for number, message in enumerate(raw, 1):
        if not isinstance(message, dict):
            return f"message {number}: {json_kind(message)}, not an object"
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            return f"message {number}: unknown role {role!r} (roles: {', '.join(ROLES)})"
        items = _content_items(content)
        if isinstance(items, str):
            return f"message {number}: {items}"
        messages.append({"role": role, "content": items})
    return messages


def _content_items(content: Any) -> list[dict[str, str]] | str:
    """A message's content as image and text items: a string's `<image>` tags, or a list's
    items (Parquet gives each item every field, None where it has none)."""
    if isinstance(content, str):
        return _split_tags(content)
    if not isinstance(content, list):
        return f"content is {json_kind(content)}, not a string or an array"
    items: list[dict[str, str]] = []
    for item in content:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "image":
            items.append({"type": "image"})
        elif kind == "text" and isinstance(item.get("text"), str):
            items += _split_tags(item["text"])
        else:
            return f"content item {item!r} is neither an image nor a text"
    return items


def _split_tags(text: str) -> list[dict[str, str]]:
    """A text's `<image>` tags as image items, the text around them as text items."""
    items: list[dict[str, str]] = []
    for number, piece in enumerate(text.split(IMAGE_TAG)):
        if number:
            items.append({"type": "image"})
        if piece:
            items.append({"type": "text", "text": piece})
    return items


def _image_refs(images: Any, folder: Path) -> tuple[ImageRef, ...] | str:
    if images is None:
        return ()
    if isinstance(images, (str, dict)):
        images = [images]
    if not isinstance(images, list):
        return f"images are {json_kind(images)}, not a path or a list"
    refs = []
    for number, image in enumerate(images, 1):
        if isinstance(image, str):
            refs.append(ImageRef(str(folder / image), path=folder / image))
        elif isinstance(image, dict) and isinstance(image.get("bytes"), bytes):
            refs.append(ImageRef(image.get("path") or f"image {number}", data=image["bytes"]))
        elif isinstance(image, dict) and isinstance(image.get("path"), str):
            refs.append(ImageRef(str(folder / image["path"]), path=folder / image["path"]))
        else:
            return f"image {number} is {json_kind(image)}, not a path or image bytes"
    return tuple(refs)


def _checked(messages: list[dict[str, Any]], images: tuple[ImageRef, ...]) -> VLMRecord | str:
    """The record, if its placeholders match its images and it has something to learn."""
    if not messages:
        return "no messages"
    tags = sum(item["type"] == "image" for m in messages for item in m["content"])
    if tags != len(images):
        return (f"{tags} image placeholder{'s' if tags != 1 else ''} for {len(images)} "
                f"image{'s' if len(images) != 1 else ''}")
    if not any(m["role"] == "assistant" for m in messages):
        return "no assistant turn (nothing for the loss to count)"
    return VLMRecord(tuple(messages), images)
