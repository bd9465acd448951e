"""What a Loader's workers hold of the dataset: nothing that grows with it. Sizes and labels
are the node's memory maps (page cache, shared), not each worker's copy of every sample's."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import datapipe as dp
from datapipe.suite.groups.scale_peers import tree_memory, write_images

SIZES = (10_000, 100_000)
WORKERS = 2
# Bytes a sample a worker: a copy of the label, height and width columns costs ~35 at int64.
MOST_PER_SAMPLE = 8


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("corpora")
    for n in SIZES:
        write_images(root / str(n), n)
    return {n: root / str(n) / "dataset" for n in SIZES}


def _workers_mb(path: Path) -> float:
    """Private memory (Pss_Anon + Pss_Shmem) of the workers once each has built batches and
    waits with its prefetch queue full, so that none is caught half-way through starting."""
    with dp.Loader(path, batch_size=64, num_workers=WORKERS, seed=0,
                   transform=dp.image.CenterCrop(8)) as loader:
        batches = iter(loader)
        for _ in range(2 * WORKERS):
            next(batches)
        time.sleep(1.0)
        return tree_memory(loader.worker_pids)


def test_worker_memory_does_not_grow_with_the_corpus(corpora: dict[int, Path]) -> None:
    """Both on the first run over a corpus, whose workers build the maps, and on the next,
    whose workers map what the first left."""
    small, large = SIZES
    for run in ("building", "mapping"):
        growth = (_workers_mb(corpora[large]) - _workers_mb(corpora[small])) * 2**20
        per_sample = growth / (large - small) / WORKERS
        assert per_sample < MOST_PER_SAMPLE, f"{run}: {per_sample:.1f} bytes a sample a worker"
