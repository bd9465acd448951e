"""How each token loader does the text group's job, as its users write it: one epoch of the
tokenized corpus in batches of about `max_tokens` tokens, counting real tokens (of documents)
and computed ones (rows x width); and the makers of the corpus and each tool's copy of it."""

from __future__ import annotations

import math
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datapipe.suite.fixtures import build_once, resolve_tokenizer, sentence, write_corpus
from datapipe.suite.runner import Record

BLOCK = 1024  # nanoGPT's block_size, and the fixed layout's seq_len
PAD_MULTIPLE = 8  # padded layout: rows rounded up to a multiple of 8 (Tensor Cores)
IGNORE = -100
# Document lengths in words: log-normal (median 120 words), clipped to [3, 2500]; the cap keeps
# every document under 16384 tokens even byte-tokenized, which layout="padded" needs.
MEDIAN_WORDS, SIGMA, MIN_WORDS, MAX_WORDS = 120, 1.1, 3, 2500

Batch = dict[str, Any]


@dataclass(frozen=True)
class Job:
    """What one measured run gets, passed to the child process as JSON."""

    data: str  # the tool's tokenized copy of the corpus
    max_tokens: int
    batch_size: int = 0  # datasets: rows per batch
    tokens: int = 0  # memmap: tokens to draw, one epoch of the corpus
    seed: int = 0


# ---------------------------------------------------------------- the corpus and its copies


def skewed_document(rng: random.Random, cumulative: list[float]) -> str:
    """A document of log-normal length in words, of Zipf-picked words (fixtures.write_corpus)."""
    words = round(min(MAX_WORDS, max(MIN_WORDS, rng.lognormvariate(math.log(MEDIAN_WORDS),
                                                                  SIGMA))))
    sentences, count = [], 0
    while count < words:
        sentences.append(sentence(rng, cumulative))
        count += sentences[-1].count(" ") + 1
    return " ".join(" ".join(sentences).split(" ")[:words])


def convert_datapipe(corpus: Path, tokenizer: str, out: Path, workers: int) -> None:
    """`datapipe convert text`, as a user runs it."""
    subprocess.run([sys.executable, "-m", "datapipe.cli", "convert", "text", str(corpus),
                    str(out), "--tokenizer", tokenizer, "--append-eos", "--workers",
                    str(workers), "--overwrite"], check=True, stdout=subprocess.DEVNULL)


def suite_dataset(data: Path, megabytes: int, workers: int) -> tuple[Path, str, str, Path]:
    """The text suite's corpus of skewed documents and its datapipe conversion (wordpiece, EOS
    appended), each made once under DATA: (corpus, tokenizer spec, tokenizer name, dataset).
    The other tools' copies go beside the dataset, in its parent folder."""
    corpus = build_once(data / f"text-skewed-{megabytes}MB", f"writing a {megabytes} MB skewed "
                        "text corpus ...", lambda out: write_corpus(
                            out, megabytes, document=skewed_document))
    spec, tokenizer = resolve_tokenizer("wordpiece", data)
    dataset = build_once(data / "text" / f"{megabytes}MB-{tokenizer}" / "datapipe",
                         f"converting {corpus} to datapipe ...",
                         lambda out: convert_datapipe(corpus, spec, out, workers))
    return corpus, spec, tokenizer, dataset


def build_memmap(dataset: Path, out: Path) -> None:
    """Every document's ids back to back in one uint16 file, as nanoGPT's prepare.py does."""
    import numpy as np
    import pyarrow as pa

    from datapipe.format.dataset import Dataset

    with Dataset(dataset) as ds, open(out, "wb") as sink:
        for shard in ds.manifest.shards:
            with pa.memory_map(str(dataset / shard.name)) as source:
                tokens = pa.ipc.open_file(source).read_all().column("tokens")
                values = tokens.combine_chunks().flatten().to_numpy()
                sink.write(values.astype(np.uint16, copy=False).tobytes())


def tokenize_hf(corpus: Path, tokenizer: str, eos_id: int, out: Path, workers: int) -> None:
    """`load_dataset("text")` + `.map(batched=True)` with the ids of `datapipe convert text
    --append-eos` (no special tokens, EOS last), saved where the runs load it from."""
    import datasets
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer)

    def encode(batch: dict[str, list[str]]) -> dict[str, Any]:
        encodings = tok.encode_batch(batch["text"], add_special_tokens=False)
        return {"input_ids": [[*e.ids, eos_id] for e in encodings]}

    datasets.disable_progress_bars()
    cache = out.with_name("hf-cache")
    files = sorted(str(p) for p in corpus.glob("*.txt"))
    data = datasets.load_dataset("text", data_files=files, split="train", cache_dir=str(cache))
    data.map(encode, batched=True, num_proc=workers, remove_columns=["text"]).save_to_disk(
        str(out))
    shutil.rmtree(cache, ignore_errors=True)


def hf_copy(corpus: Path, tokenizer: str, dataset: Path, workers: int) -> Path:
    """The `datasets` copy of the corpus (tokenize_hf, with the EOS id of `dataset`, datapipe's
    conversion of it), made once beside that dataset."""
    from datapipe.format.dataset import Dataset

    with Dataset(dataset) as ds:
        eos_id = int(ds.manifest.tokenizer["eos_id"])
    return build_once(dataset.parent / "hf", f"tokenizing {corpus} for datasets ...",
                      lambda out: tokenize_hf(corpus, tokenizer, eos_id, out, workers))


def hf_counts(path: Path) -> tuple[int, int]:
    """(documents, tokens) of the `datasets` copy."""
    import datasets
    import pyarrow.compute as pc

    data = datasets.load_from_disk(str(path))
    return len(data), int(pc.sum(pc.list_value_length(data.data.column("input_ids"))).as_py())


# ---------------------------------------------------------------- the loaders (in the child)


def one_thread(run: Callable[..., Record], **settings: Any) -> Callable[[Job], Record]:
    """run(job, **settings) on one torch intra-op thread, as in DataLoader workers: with two, on
    a busy 2-core machine, the pad collate's OpenMP threads spun and its epoch took 10x longer."""
    def measure(job: Job) -> Record:
        import torch

        torch.set_num_threads(1)
        return run(job, **settings)
    return measure


def one_epoch(make: Callable[[], Iterable[Batch]], count: Callable[[Batch], tuple[int, int]],
              ) -> Record:
    """Construct a loader and drain one epoch, counting (real, computed) tokens. Start-up: from
    constructing to the first batch; the epoch: from constructed to the last batch."""
    start = time.perf_counter()
    loader = make()
    made = time.perf_counter()
    first, real, computed, batches = math.nan, 0, 0, 0
    for batch in loader:
        if not batches:
            first = time.perf_counter()
        r, c = count(batch)
        real, computed, batches = real + r, computed + c, batches + 1
    end = time.perf_counter()
    if hasattr(loader, "close"):
        loader.close()
    return {"startup_s": first - start, "epoch_s": end - made, "real_tokens": real,
            "computed_tokens": computed, "batches": batches}


def real_and_computed(batch: Batch) -> tuple[int, int]:
    return batch["num_real_tokens"], batch["input_ids"].numel()


def pad_collate(features: list[dict[str, list[int]]], pad_id: int = 0) -> Batch:
    """DataCollatorWithPadding's result (pad to the longest row, attention_mask), plus the
    labels of DataCollatorForLanguageModeling(mlm=False): input_ids with padding -100."""
    import torch

    lengths = [len(f["input_ids"]) for f in features]
    ids = torch.full((len(features), max(lengths)), pad_id, dtype=torch.int64)
    for row, feature in enumerate(features):
        ids[row, : lengths[row]] = torch.as_tensor(feature["input_ids"])
    mask = (torch.arange(ids.shape[1])[None, :] < torch.tensor(lengths)[:, None]).long()
    return {"input_ids": ids, "attention_mask": mask,
            "labels": ids.masked_fill(mask == 0, IGNORE), "num_real_tokens": sum(lengths)}


def run_datasets(job: Job, workers: int) -> Record:
    import datasets
    import torch
    from torch.utils.data import DataLoader

    datasets.disable_progress_bars()
    # Plain python lists, as the Trainer hands them to its collator.
    return one_epoch(lambda: DataLoader(datasets.load_from_disk(job.data),
                                        batch_size=job.batch_size, shuffle=True,
                                        num_workers=workers, collate_fn=pad_collate,
                                        generator=torch.Generator().manual_seed(job.seed)),
                     real_and_computed)


def run_memmap(job: Job) -> Record:
    import numpy as np
    import torch

    rows = max(1, job.max_tokens // BLOCK)
    generator = torch.Generator().manual_seed(job.seed)

    def batches() -> Iterator[Batch]:
        for _ in range(-(-job.tokens // (rows * BLOCK))):
            # nanoGPT's get_batch, which re-opens the memmap each batch to stop a memory leak.
            data = np.memmap(job.data, dtype=np.uint16, mode="r")
            ix = torch.randint(len(data) - BLOCK, (rows,), generator=generator)
            x = torch.stack([torch.from_numpy(data[i:i + BLOCK].astype(np.int64)) for i in ix])
            y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + BLOCK].astype(np.int64))
                             for i in ix])
            yield {"input_ids": x, "labels": y}

    return one_epoch(batches, lambda b: (b["input_ids"].numel(), b["input_ids"].numel()))


def run_datapipe(job: Job, layout: str | None = None, preset: str | None = None) -> Record:
    """TokenLoader in `layout` (or a consumer's `preset`: its layout and field names); its
    start-up measured first with the length cache to build, then an epoch of a second one."""
    import datapipe
    import datapipe.loader  # imported before the clock starts, as for the others

    extra = {"padded": {"pad_to_multiple_of": PAD_MULTIPLE}, "fixed": {"seq_len": BLOCK}}
    chosen = {"preset": preset} if preset else {"layout": layout, **extra.get(layout, {})}
    loaders: list[Any] = []

    def make() -> Any:
        loaders.append(datapipe.TokenLoader(job.data, max_tokens=job.max_tokens, shuffle=True,
                                            seed=job.seed, num_workers=0, **chosen))
        return loaders[-1]

    for cache in Path(job.data).glob(".datapipe-length-index-*.npy"):
        cache.unlink()  # so that the first construction builds the length cache
    start = time.perf_counter()
    with make() as cold:
        next(iter(cold))
    cold_s = time.perf_counter() - start
    record = one_epoch(make, real_and_computed)
    return {**record, "startup_cold_s": cold_s, "loader_efficiency": loaders[1].efficiency}


def run_hf_flattening(job: Job, workers: int) -> Record:
    """Padding-free as HF documents it: DataCollatorWithFlattening (flash-attention kwargs and
    seq_idx on) over the `datasets` copy, in a DataLoader, as the Trainer feeds it."""
    import datasets
    import torch
    from torch.utils.data import DataLoader
    from transformers import DataCollatorWithFlattening

    datasets.disable_progress_bars()
    collate = DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_seq_idx=True,
                                         return_tensors="pt")
    return one_epoch(lambda: DataLoader(datasets.load_from_disk(job.data),
                                        batch_size=job.batch_size, shuffle=True,
                                        num_workers=workers, collate_fn=collate,
                                        generator=torch.Generator().manual_seed(job.seed)),
                     lambda b: (b["input_ids"].numel(), b["input_ids"].numel()))

