"""The mixture group's inputs and rows (mixture.py): one dataset and the same samples split
into three sources of 60, 30 and 10 percent, read by one loader alone and by a mixture of the
three at those weights; and HF's `interleave_datasets` over the same three sets of documents.

Each source is a random subset of the one dataset's samples: the images written with
`dp.DatasetWriter` (the same JPEG bytes, labels and classes), the text's documents converted
from their lines of the corpus as the one dataset was (the same token ids and tokenizer), so
that a mixture's batches read the same data as the one dataset's and the epochs are the same
size.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from datapipe.suite.fixtures import build_once
from datapipe.suite.groups import text_peers as tp
from datapipe.suite.runner import Record

# The sources of a mixture, by name, and their weights (their shares of the samples or tokens).
SPLITS = {"a": 0.6, "b": 0.3, "c": 0.1}
MAX_TOKENS = 16384
# HF's interleave_datasets ends an epoch when every source has been used up at least once (the
# sources used up first start again), so that an epoch holds every document, as the mixture's.
STOPPING = "all_exhausted"
SPLITS_VERSION = 2  # bump when the splits are made otherwise, so that cached ones are remade


@dataclass(frozen=True)
class Job:
    """What one measured run gets, passed to the child process as JSON; the image rows read
    it as image_peers.Job (data, workers, epochs, warmup, seed, batch)."""

    data: str | dict[str, str]  # the one dataset, or name -> dataset: the mixture's sources
    workers: int
    epochs: int  # images: measured, after the warm-up ones; tokens: per run
    warmup: int = 0
    seed: int = 0
    batch: int = 64  # images per batch; rows per batch of the `datasets` pipeline
    max_tokens: int = MAX_TOKENS

    @property
    def total_epochs(self) -> int:
        return self.warmup + self.epochs


# ---------------------------------------------------------------- the splits


def split_by_share(sizes: Any, seed: int = 0) -> dict[str, Any]:
    """The ids of a dataset's samples in SPLITS' random parts, each holding its share of the
    sizes' sum (1 per sample: of the samples; lengths: of the tokens) to within one sample;
    the parts are disjoint and hold every id, each in increasing order."""
    import numpy as np

    from datapipe.sampling.mixture_weights import apportion

    sizes = np.asarray(sizes, dtype=np.int64)
    order = np.random.default_rng(seed).permutation(len(sizes))
    cumulative = np.cumsum(sizes[order])
    targets = np.cumsum(apportion(int(cumulative[-1]), [Fraction(s).limit_denominator()
                                                        for s in SPLITS.values()]))
    # Each part ends with the sample that reaches its target total (the last: every sample).
    ends = [int(np.searchsorted(cumulative, t)) + 1 for t in targets[:-1]] + [len(sizes)]
    starts = [0, *ends[:-1]]
    return {name: np.sort(order[start:end])
            for name, start, end in zip(SPLITS, starts, ends, strict=True)}


def write_image_splits(dataset: Path, out: Path) -> None:
    """SPLITS of a converted image dataset, a DatasetWriter dataset each: its samples' JPEG
    bytes, labels and paths, its classes."""
    import datapipe as dp
    from datapipe.format.dataset import Dataset

    with Dataset(dataset) as ds:
        parts = split_by_share([1] * len(ds))
        for name, ids in parts.items():
            with dp.DatasetWriter(out / name, {"image": "jpeg", "label": "int64",
                                               "path": "string"},
                                  classes=ds.manifest.classes) as writer:
                for i in ids.tolist():
                    sample = ds[i]
                    writer.write({"image": sample["image"].tobytes(), "label": sample["label"],
                                  "path": sample["path"]})


def write_token_splits(dataset: Path, corpus: Path, tokenizer: str, out: Path,
                       workers: int) -> None:
    """SPLITS of the text suite's dataset by tokens, each its documents' lines of the corpus
    converted as the dataset was (the same token ids, the same tokenizer in its manifest); and
    each split's ids in the one dataset (ids.npz: for the `datasets` copy's splits)."""
    import shutil

    import numpy as np

    from datapipe.format.dataset import Dataset

    with Dataset(dataset) as ds:
        parts = split_by_share(ds.scalar("length"))
    # `convert text` makes a document of each line that is not blank, in the files' order.
    lines = [line for path in sorted(corpus.glob("*.txt"))
             for line in path.read_text().split("\n") if line.strip()]
    if len(lines) != sum(len(ids) for ids in parts.values()):
        raise RuntimeError(f"{corpus}: {len(lines)} documents, not those of {dataset}")
    for name, ids in parts.items():
        text = out / "text" / name
        text.mkdir(parents=True)
        (text / "corpus.txt").write_text("".join(lines[i] + "\n" for i in ids.tolist()))
        tp.convert_datapipe(text, tokenizer, out / name, workers)
    shutil.rmtree(out / "text")
    np.savez(out / "ids.npz", **parts)


def image_splits(dataset: Path) -> Path:
    """The image splits of `dataset`, made once beside it (keyed by its manifest)."""
    return build_once(splits_dir(dataset), f"splitting {dataset} into {sources_line()} ...",
                      lambda out: write_image_splits(dataset, out))


def token_splits(dataset: Path, corpus: Path, tokenizer: str, workers: int) -> Path:
    """The text splits of `dataset` (converted from `corpus`), made once beside it."""
    return build_once(splits_dir(dataset), f"splitting {dataset} by tokens into "
                      f"{sources_line()} ...",
                      lambda out: write_token_splits(dataset, corpus, tokenizer, out, workers))


def hf_splits(hf_copy: Path, splits: Path) -> Path:
    """The `datasets` copy's documents in the token splits' parts, each saved to disk as a
    dataset of its own (the copy holds the one dataset's documents in its order)."""
    def write(out: Path) -> None:
        import datasets
        import numpy as np

        datasets.disable_progress_bars()
        copy = datasets.load_from_disk(str(hf_copy))
        with np.load(splits / "ids.npz") as parts:
            for name in SPLITS:
                copy.select(parts[name]).save_to_disk(str(out / name))
    return build_once(splits.with_name(splits.name + "-hf"), f"splitting {hf_copy} as "
                      f"{splits} ...", write)


def splits_dir(dataset: Path) -> Path:
    from datapipe.format.dataset import Dataset

    with Dataset(dataset) as ds:
        key = ds.manifest_digest().split(":")[-1][:12]
    return dataset.parent / f"mixture-v{SPLITS_VERSION}-{key}"


def sources_line() -> str:
    return ", ".join(f"{name} {share:.0%}" for name, share in SPLITS.items())


# ---------------------------------------------------------------- the token rows (in the child)


def epochs_of(loader: Any, epochs: int, ends: list[tuple[float, int]]) -> Iterator[tp.Batch]:
    """Every batch of `epochs` passes of a datapipe loader, which it closes at the end; each
    pass's end (perf_counter, real tokens so far) appended to `ends`."""
    real = 0
    with loader:
        for _ in range(epochs):
            for batch in loader:
                real += batch["num_real_tokens"]
                yield batch
            ends.append((time.perf_counter(), real))


def run_tokens(job: Job, **mixing: Any) -> Record:
    """TokenLoader, packed, over the one dataset or (with weights=) the mixture: `job.epochs`
    epochs, clocked as the text group clocks one (from constructed to the last batch); and
    each epoch's real tokens/s (`epoch_rates`: its planning included, as it runs when its
    pass begins)."""
    import datapipe
    import datapipe.loader  # imported before the clock starts, as for the others

    ends: list[tuple[float, int]] = []
    start = time.process_time()  # the loader's work, all in this process: steadier than
    record = tp.one_epoch(lambda: epochs_of(datapipe.TokenLoader(  # seconds on a busy machine
        job.data, max_tokens=job.max_tokens, layout="packed", shuffle=True, seed=job.seed,
        num_workers=0, **mixing), job.epochs, ends), tp.real_and_computed)
    rates = [(b_real - a_real) / (b_t - a_t) for (a_t, a_real), (b_t, b_real)
             in itertools.pairwise(ends)]  # from the first epoch's end: the loader was made
    return {**record, "cpu_rate": record["real_tokens"] / (time.process_time() - start),
            "epoch_rates": rates}


def run_interleave(job: Job) -> Record:
    """HF `interleave_datasets(probabilities=...)` over the three `datasets` copies, in a torch
    DataLoader as the text group's `datasets` peer feeds its copy (pad to the longest row)."""
    import datasets
    import torch
    from torch.utils.data import DataLoader

    datasets.disable_progress_bars()

    def make() -> DataLoader:
        parts = [datasets.load_from_disk(job.data[name]) for name in SPLITS]
        mixed = datasets.interleave_datasets(parts, probabilities=list(SPLITS.values()),
                                             seed=job.seed, stopping_strategy=STOPPING)
        return DataLoader(mixed, batch_size=job.batch, shuffle=True, num_workers=job.workers,
                          collate_fn=tp.pad_collate,
                          generator=torch.Generator().manual_seed(job.seed))

    return tp.one_epoch(make, tp.real_and_computed)
