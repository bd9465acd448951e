"""Zero-copy batches: a buffer is reused only once nothing refers to the batch it held."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest
import torch

import datapipe as dp
from datapipe.loader.slots import SHARED_MEMFD, SlotTable
from tests.conftest import convert
from tests.imagegen import make_image_folder

CROP = dp.image.RandomResizedCrop(24) | dp.image.HorizontalFlip()

needs_memfd = pytest.mark.skipif(not SHARED_MEMFD, reason="zero-copy needs memfd (Linux)")


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("slots")
    src = make_image_folder(root / "src", classes=2, per_class=20, size=(60, 40))
    convert("images", src, root / "out", "--short-side", "40")
    return root / "out"


def _epoch_copies(shards: Path, workers: int) -> list[torch.Tensor]:
    """Each batch copied the moment it arrives: the ground truth."""
    with dp.Loader(shards, batch_size=3, num_workers=workers, seed=5, transform=CROP) as loader:
        return [batch["image"].clone() for batch in loader]


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_kept_by_the_caller_are_never_overwritten(shards: Path, workers: int) -> None:
    expected = _epoch_copies(shards, workers)
    with dp.Loader(shards, batch_size=3, num_workers=workers, seed=5, transform=CROP) as loader:
        kept = [batch["image"] for batch in loader]  # 14 batches, more than the buffers in flight
        views = [image[0, :, :4] for image in kept]  # a view outlives its batch
        first_pixels = views[0].clone()
        del kept
        gc.collect()
        for epoch in range(1, 3):  # more epochs reuse whatever buffers are free
            loader.set_epoch(epoch)
            for _ in loader:
                pass
        assert torch.equal(views[0], first_pixels)
    assert all(torch.equal(v, e[0, :, :4]) for v, e in zip(views, expected, strict=True))


@needs_memfd
def test_a_loop_that_drops_its_batches_cycles_through_a_few_buffers(shards: Path) -> None:
    with dp.Loader(shards, batch_size=3, num_workers=2, prefetch=2, transform=CROP) as loader:
        for epoch in range(3):
            loader.set_epoch(epoch)
            for batch in loader:
                del batch
        pool = loader._producer._pool
        assert len(pool._slots) <= pool.capacity + 3


@needs_memfd
def test_buffers_made_for_kept_batches_are_given_back_when_they_are_dropped() -> None:
    table = SlotTable(64, spare=1)
    refs = [table.acquire() for _ in range(3)]
    leases = [table.lease(r.id) for r in refs]
    leases[0].fill_(7)
    more = table.acquire()  # all three leased: a fourth buffer
    assert len(table) == 4 and more.id not in {r.id for r in refs}
    table.lease(more.id)  # dropped at once: free again
    assert table.acquire().id == more.id  # busy from here on
    del leases
    gc.collect()
    retired = table.retire_surplus()  # three free: all but the one spare go
    assert len(table) == 2 and len(retired) == 2 and more.id not in retired
    table.close()


def test_slot_bytes_reach_the_consumer_unchanged() -> None:
    table = SlotTable(16, spare=1, prefork=2)
    ref = table.acquire()
    view = np.frombuffer(table._slots[ref.id].buffer, dtype=np.uint8)
    view[:] = np.arange(16, dtype=np.uint8)
    del view
    assert table.lease(ref.id).tolist() == list(range(16))
    table.close()


def test_batches_outlive_the_loader_and_its_workers(shards: Path) -> None:
    expected = _epoch_copies(shards, 2)
    with dp.Loader(shards, batch_size=3, num_workers=2, seed=5, transform=CROP,
                   persistent=False) as loader:
        kept = [batch["image"] for batch in loader]  # workers and buffers closed after the epoch
    gc.collect()
    assert all(torch.equal(k, e) for k, e in zip(kept, expected, strict=True))
