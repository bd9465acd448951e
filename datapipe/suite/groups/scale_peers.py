"""The scale group's inputs and runs (scale.py): corpora of 10^k tiny documents or tiny images,
written straight into datapipe's shard format, and one run of a loader over one of them.

The plans under test depend on how many samples there are, not on their bytes: documents of
2-8 tokens and one 16x16 JPEG repeated keep 10^8 documents (about 2 GB, plus the flat token
file of the memmap floor) and 10^7 images (about 3.5 GB) on an ordinary disk. Their columns are
made a million rows at a time with numpy and appended by the format's own ShardFile (its
Arrow streams and hashes), with the manifest DatasetWriter writes for such samples: what any
reader checks, it gets.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from datapipe.suite.groups.text_peers import BLOCK
from datapipe.suite.runner import Record

CHUNK_ROWS = 1 << 20  # rows per record batch
SHARD_BYTES = 256 << 20  # DatasetWriter's default shard size
DOC_TOKENS = (2, 8)  # each document's length, uniform in this range
VOCAB = 32000
IMAGE_SIDE, CROP, CLASSES = 16, 16, 10
RESUME_AFTER = 3  # batches taken before the state is saved (fewer in a short epoch)
MEMORY_FIELDS = ("Pss_Anon", "Pss_Shmem")


@dataclass(frozen=True)
class Job:
    """One run over one corpus, passed to the child process as JSON."""

    data: str  # the dataset, or the memmap floor's token file
    samples: int  # documents or images in it
    workers: int = 2
    max_tokens: int = 16384
    batch: int = 256  # images per batch
    seed: int = 0
    mix_with: str | None = None  # a mixture row's second source


# ---------------------------------------------------------------- the corpora (in the parent)


class _Joined:
    """A variable-length column of a chunk: every row's values end to end, and the offsets."""

    def __init__(self, offsets: np.ndarray, values: np.ndarray) -> None:
        self._offsets, self._values = offsets, values

    def offsets(self) -> np.ndarray:
        return self._offsets

    def values(self) -> np.ndarray:
        return self._values


class _Chunk:
    """Rows already laid out column by column: what ShardFile.append reads of a ChunkColumns."""

    def __init__(self, rows: int, scalars: dict[str, np.ndarray],
                 joined: dict[str, _Joined]) -> None:
        self.rows, self._scalars, self._joined = rows, scalars, joined

    def scalars(self, name: str) -> np.ndarray:
        return self._scalars[name]

    def joined(self, name: str) -> _Joined:
        return self._joined[name]

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._scalars.values()) + \
            sum(j.offsets().nbytes + j.values().nbytes for j in self._joined.values())


def write_dataset(out: Path, columns: dict[str, str], chunks: Iterator[_Chunk],
                  classes: tuple[str, ...] | None = None) -> None:
    """A dataset of the chunks' rows at `out`: Arrow shards of about SHARD_BYTES, then the
    manifest DatasetWriter(out, columns, classes=classes) would write for the same rows."""
    from datapipe.format.chunk_columns import ChunkColumns
    from datapipe.format.manifest import Manifest, ShardInfo
    from datapipe.format.sample_schema import parse_schema
    from datapipe.format.shard_file import ShardFile
    from datapipe.format.writer import shard_name

    schema = parse_schema(columns, classes)
    out.mkdir(parents=True, exist_ok=True)
    shards: list[ShardInfo] = []
    shard: ShardFile | None = None
    rows = size = 0

    def close() -> None:
        assert shard is not None
        digest = shard.end()
        shard.sync()
        name = shard_name(len(shards), "arrow")
        shards.append(ShardInfo(name, rows, (out / name).stat().st_size, digest))

    for chunk in chunks:
        if shard is None:
            shard = ShardFile(out / shard_name(len(shards), "arrow"), "arrow", schema.columns)
            rows = size = 0
        shard.append(cast(ChunkColumns, chunk))
        rows, size = rows + chunk.rows, size + chunk.nbytes()
        if size >= SHARD_BYTES:
            close()
            shard = None
    if shard is not None:
        close()
    settings: dict[str, Any] = {"shard_size": SHARD_BYTES}
    if schema.encoding is not None:
        settings["encoding"] = schema.encoding
    total = sum(s.rows for s in shards)
    Manifest(kind=schema.kind, shard_format="arrow", columns=schema.columns,
             shards=tuple(shards), settings=settings, classes=classes,
             stats={"inputs": total, "rejected": 0}).save(out)


def document_chunks(count: int, seed: int = 0) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(lengths, token ids end to end) of `count` documents, CHUNK_ROWS at a time."""
    for index, start in enumerate(range(0, count, CHUNK_ROWS)):
        rng = np.random.default_rng([seed, index])
        lengths = rng.integers(DOC_TOKENS[0], DOC_TOKENS[1] + 1, min(CHUNK_ROWS, count - start),
                               dtype=np.int32)
        yield lengths, rng.integers(0, VOCAB, int(lengths.sum()), dtype=np.uint16)


def write_tokens(out: Path, count: int) -> None:
    """out/dataset: `count` documents (tokens uint16[]); out/train.bin: their ids back to back,
    as nanoGPT's prepare.py writes them."""
    with open(out / "train.bin", "wb") as flat:
        def chunks() -> Iterator[_Chunk]:
            for lengths, ids in document_chunks(count):
                flat.write(ids.tobytes())
                offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
                np.cumsum(lengths, out=offsets[1:])
                yield _Chunk(len(lengths), {"length": lengths},
                             {"tokens": _Joined(offsets, ids)})
        write_dataset(out / "dataset", {"tokens": "uint16[]"}, chunks())


def tiny_jpeg() -> bytes:
    """One IMAGE_SIDE x IMAGE_SIDE RGB gradient, JPEG q90."""
    from PIL import Image

    ramp = np.arange(IMAGE_SIDE, dtype=np.uint8) * (255 // IMAGE_SIDE)
    pixels = np.stack(np.broadcast_arrays(ramp[None, :], ramp[:, None],
                                          np.uint8(128)), axis=-1).astype(np.uint8)
    encoded = io.BytesIO()
    Image.fromarray(pixels).save(encoded, "JPEG", quality=90, optimize=True)
    return encoded.getvalue()


def write_images(out: Path, count: int) -> None:
    """out/dataset: `count` copies of tiny_jpeg() labelled 0..CLASSES-1 in turn."""
    jpeg = np.frombuffer(tiny_jpeg(), np.uint8)

    def chunks() -> Iterator[_Chunk]:
        for start in range(0, count, CHUNK_ROWS):
            rows = min(CHUNK_ROWS, count - start)
            side = np.full(rows, IMAGE_SIDE, np.int32)
            yield _Chunk(rows, {"label": np.arange(start, start + rows) % CLASSES,
                                "height": side, "width": side},
                         {"image": _Joined(np.arange(rows + 1, dtype=np.int64) * len(jpeg),
                                           np.tile(jpeg, rows))})
    write_dataset(out / "dataset", {"image": "jpeg", "label": "int64"}, chunks(),
                  classes=tuple(f"class-{i}" for i in range(CLASSES)))


# ---------------------------------------------------------------- the runs (in the child)


def tree_memory(pids: list[int]) -> float:
    """MB of anonymous and shared memory of these processes (Pss_Anon + Pss_Shmem of each
    one's smaps_rollup): proportional shares, so pages a fork shares count once in a sum over
    the tree; page cache (Pss_File) is left out."""
    total_kb = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in MEMORY_FIELDS:
                total_kb += int(value.split()[0])
    return total_kb / 1024


def run_loader(make: Callable[[], Any]) -> Record:
    """Construct, first batch, memory then; a few batches on, the state saved, a new loader
    made, the state loaded, its first batch: each clocked."""
    start = time.perf_counter()
    loader = make()
    made = time.perf_counter()
    batches = iter(loader)
    next(batches)
    first = time.perf_counter()
    training, workers = tree_memory([os.getpid()]), tree_memory(loader.worker_pids)
    # Up to RESUME_AFTER batches, but the last state kept is a mid-epoch one. Not len(): a
    # plan made a window at a time walks the whole epoch for it.
    steps, state = 1, loader.state_dict()
    for _ in range(RESUME_AFTER - 1):
        if next(batches, None) is None:
            break
        later = loader.state_dict()
        if isinstance(later, dict) and later["epoch_finished"]:
            break
        steps, state = steps + 1, later
    loader.close()
    again_start = time.perf_counter()
    again = make()
    loading = time.perf_counter()
    again.load_state_dict(state)
    next(iter(again))
    resumed = time.perf_counter()
    again.close()
    return {"construct_s": made - start, "first_batch_s": first - made, "training_mb": training,
            "workers_mb": workers, "resume_s": resumed - loading,
            "resume_construct_s": loading - again_start, "resumed_at": steps,
            "resumed_mid_epoch": not (isinstance(state, dict) and state["epoch_finished"])}


def run_tokens(job: Job, world_size: int) -> Record:
    import datapipe
    import datapipe.loader  # imported before the clock starts

    return run_loader(lambda: datapipe.TokenLoader(
        mixed(job), max_tokens=job.max_tokens, layout="packed", shuffle=True, seed=job.seed,
        num_workers=job.workers, rank=0, world_size=world_size,
        weights=MIX_WEIGHTS if job.mix_with else None))


# A mixture row: the corpus of the size measured, and a small second source up-weighted.
MIX_WEIGHTS = {"corpus": 0.7, "small": 0.3}


def mixed(job: Job) -> Any:
    """The row's path: the corpus, or a mixture of it and `mix_with`."""
    return {"corpus": job.data, "small": job.mix_with} if job.mix_with else job.data


def run_images(job: Job, world_size: int) -> Record:
    import datapipe as dp
    import datapipe.loader

    transform = dp.image.RandomResizedCrop(CROP) | dp.image.HorizontalFlip()
    return run_loader(lambda: dp.Loader(
        mixed(job), batch_size=job.batch, shuffle=True, seed=job.seed, num_workers=job.workers,
        transform=transform, rank=0, world_size=world_size,
        weights=MIX_WEIGHTS if job.mix_with else None))


class MemmapSampler:
    """nanoGPT's get_batch as a loader: random offsets into the flat token file, a batch of
    max_tokens in rows of BLOCK (+1 for the targets), no plan; its state is the generator's."""

    worker_pids: list[int] = []  # noqa: RUF012 - none: it works in the training process

    def __init__(self, path: str, max_tokens: int, seed: int) -> None:
        import torch

        self.data = np.memmap(path, dtype=np.uint16, mode="r")
        self.block = min(BLOCK, max_tokens, len(self.data) - 1)
        self.rows = max(1, max_tokens // self.block)
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return len(self.data) // (self.rows * self.block)

    def __iter__(self) -> Iterator[Any]:
        import torch

        for _ in range(len(self)):
            ix = torch.randint(len(self.data) - self.block, (self.rows,),
                               generator=self.generator).tolist()
            yield torch.stack([torch.from_numpy(self.data[i:i + self.block + 1].astype(np.int64))
                               for i in ix])

    def state_dict(self) -> Any:
        return self.generator.get_state()

    def load_state_dict(self, state: Any) -> None:
        self.generator.set_state(state)

    def close(self) -> None:
        del self.data


def run_memmap(job: Job) -> Record:
    import torch  # noqa: F401 - imported before the clock starts, as the loaders' packages

    return run_loader(lambda: MemmapSampler(job.data, job.max_tokens, job.seed))
