"""One dataset written by N processes at once: each writes a part, `merge_parts` joins them.

Part i of N writes its shards into the dataset's own folder (or URL) under names of its own
(`shard-part00003-00000.arrow`, ...), and, when it closes, a record of them
(`.datapipe-part-00003.json`: the manifest the part would have alone, and i and N). The merge
checks that all N records are there and agree, then writes the one manifest listing every
part's shards in part order: no shard byte is copied or moved. Until then the folder is no
dataset: a loader refuses it, as it refuses a conversion in progress.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from datapipe.errors import ArgumentError, DataError
from datapipe.format.destination import WRITER_WORDING, is_ours, writing
from datapipe.format.manifest import MANIFEST_NAME, PART_RECORD_PREFIX, Manifest, write_atomic
from datapipe.format.output_lock import OutputLock
from datapipe.format.remote import RemoteDirectory, is_url, local_path

RECORD_PREFIX = PART_RECORD_PREFIX
MAX_PARTS = 100_000  # five digits in the names


def shard_prefix(part: int) -> str:
    return f"shard-part{part:05d}-"


def record_name(part: int) -> str:
    return f"{RECORD_PREFIX}{part:05d}.json"


def owned_by_another_part(name: str, part: int) -> bool:
    """Whether `name` is another part's shard or record (which part i must leave alone)."""
    mine = name.startswith((shard_prefix(part), record_name(part)))
    return not mine and name.startswith(("shard-part", RECORD_PREFIX))


def clearable_by_part(part: int, name: str) -> bool:
    """Whether part `part` writing over a dataset (overwrite=True) may remove `name`."""
    return is_ours(name) and not owned_by_another_part(name, part)


def record_bytes(manifest: Manifest, part: int, parts: int) -> bytes:
    return (json.dumps({**manifest.to_json(), "part": part, "parts": parts}, indent=1)
            + "\n").encode()


class _Files(Protocol):
    def sizes(self) -> dict[str, int]: ...
    def read_bytes(self, name: str) -> bytes: ...
    def write_bytes(self, name: str, data: bytes) -> None: ...
    def delete(self, name: str) -> None: ...


class _Folder:
    """A local folder with the few calls of RemoteDirectory the merge makes."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def sizes(self) -> dict[str, int]:
        return {p.name: p.stat().st_size for p in self.folder.iterdir() if p.is_file()}

    def read_bytes(self, name: str) -> bytes:
        return (self.folder / name).read_bytes()

    def write_bytes(self, name: str, data: bytes) -> None:
        write_atomic(self.folder / name, data)

    def delete(self, name: str) -> None:
        (self.folder / name).unlink(missing_ok=True)


def merge_parts(out: str | Path) -> Manifest:
    """Join the parts written into `out` (a folder or URL) by `DatasetWriter(out, ...,
    part=i, parts=N)` into one dataset, and return its manifest. Refused, before anything
    changes, while a part is missing or still being written, or when the parts disagree."""
    if is_url(out):
        store = RemoteDirectory(str(out))
        return _merge(store, store.url)
    folder = local_path(out)
    if not folder.is_dir():
        raise ArgumentError(f"merge_parts: {folder} is not a folder")
    lock = OutputLock(folder, f"merge_parts {folder}", "merge_parts")
    with writing(f"merge_parts {folder}", WRITER_WORDING):
        lock.acquire()  # exclusive: refused while a part still writes
        try:
            return _merge(_Folder(folder), str(folder))
        finally:
            lock.release()


def _merge(files: _Files, where: str) -> Manifest:
    present = files.sizes()
    records = sorted(n for n in present if n.startswith(RECORD_PREFIX) and n.endswith(".json"))
    if not records:
        already = " (it holds a dataset already)" if MANIFEST_NAME in present else ""
        raise DataError(f"merge_parts {where}: no finished part to merge{already}")
    parts = [_read_record(files, name, where) for name in records]
    manifest = _joined(parts, where)
    for shard in manifest.shards:
        if present.get(shard.name) != shard.bytes:
            raise DataError(f"merge_parts {where}: shard {shard.name} is missing or not "
                            f"{shard.bytes} bytes; write its part again")
    files.write_bytes(MANIFEST_NAME, manifest.to_bytes())  # from here on, a dataset
    listed = {s.name for s in manifest.shards}
    for name in present:
        if name in records or (name.startswith("shard-") and name not in listed):
            files.delete(name)  # the records, and shards of failed attempts or of old data
    return manifest


def _read_record(files: _Files, name: str, where: str) -> tuple[int, int, Manifest]:
    source = f"{where}/{name}"
    try:
        obj = json.loads(files.read_bytes(name))
        part, parts = obj["part"], obj["parts"]
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"merge_parts {source}: unreadable part record ({exc})") from None
    if not (isinstance(part, int) and isinstance(parts, int) and 0 <= part < parts):
        raise DataError(f"merge_parts {source}: part {part!r} of {parts!r} is not a part")
    return part, parts, Manifest.from_json(obj, source=source)


def _joined(parts: list[tuple[int, int, Manifest]], where: str) -> Manifest:
    """The dataset of all parts, in part order, once every part is there and they agree."""
    counts = {n for _, n, _ in parts}
    if len(counts) > 1:
        raise DataError(f"merge_parts {where}: the parts disagree on how many there are "
                        f"({sorted(counts)}); write them again with one parts=N")
    count = counts.pop()
    done = {i for i, _, _ in parts}
    missing = [i for i in range(count) if i not in done]
    if missing:
        raise DataError(f"merge_parts {where}: part {missing[0]} of {count} is not finished "
                        f"({len(missing)} missing); run its writer (again), then merge")
    ordered = [m for _, _, m in sorted(parts, key=lambda p: p[0])]
    first = ordered[0]
    for i, manifest in enumerate(ordered):
        if _shape(manifest) != _shape(first):
            raise DataError(f"merge_parts {where}: part {i} was written with other columns "
                            f"or settings than part 0; write every part with the same ones")
    stats = {"inputs": sum(m.stats.get("inputs", 0) for m in ordered), "rejected": 0,
             "parts": count}
    if "captions" in first.stats:
        stats["captions"] = _caption_stats([m.stats["captions"] for m in ordered])
    return Manifest(kind=first.kind, shard_format=first.shard_format, columns=first.columns,
                    shards=tuple(s for m in ordered for s in m.shards), settings=first.settings,
                    classes=first.classes, stats=stats, tokenizer=first.tokenizer)


def _caption_stats(parts: list[dict[str, int]]) -> dict[str, int]:
    return {"captions": sum(p["captions"] for p in parts),
            "truncated": sum(p["truncated"] for p in parts),
            "longest": max(p["longest"] for p in parts)}


def _shape(manifest: Manifest) -> tuple[Any, ...]:
    """What the parts of one dataset share (a shard size of their own is no matter)."""
    settings = {k: v for k, v in manifest.settings.items() if k != "shard_size"}
    return (manifest.kind, manifest.shard_format, manifest.columns, settings, manifest.classes,
            manifest.tokenizer)
