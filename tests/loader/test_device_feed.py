"""Copies to the device: page-locked batch buffers, held from reuse until their copy is done.

The bookkeeping is checked here on the CPU with real buffers and a fake CUDA (events that say
when they are done, a runtime that records registrations); the copies themselves where a CUDA
device is present.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
import torch

import datapipe as dp
from datapipe.loader import device as device_module
from datapipe.loader.device import CopyLeases, DeviceFeed
from datapipe.loader.host_pinning import PageLocker, page_locked
from datapipe.loader.slots import SHARED_MEMFD, SlotTable, lock_pages
from tests.conftest import convert
from tests.imagegen import make_image_folder

CROP = dp.image.RandomResizedCrop(24) | dp.image.HorizontalFlip()
needs_memfd = pytest.mark.skipif(not SHARED_MEMFD, reason="zero-copy needs memfd (Linux)")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


class FakeEvent:
    def __init__(self, done: bool = False) -> None:
        self.done = done

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.done = True


class FakeRuntime:
    """cudaHostRegister / cudaHostUnregister, recorded."""

    class cudaError:
        success = 0

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.registered: list[tuple[int, int]] = []
        self.unregistered: list[int] = []

    def cudaHostRegister(self, address: int, nbytes: int, flags: int) -> int:
        if self.refuse:
            return 2
        self.registered.append((address, nbytes))
        return 0

    def cudaHostUnregister(self, address: int) -> int:
        self.unregistered.append(address)
        return 0 if any(address == a for a, _ in self.registered) else 3

    def cudaGetErrorString(self, error: int) -> str:
        return "out of memory"


def test_leases_are_let_go_of_in_order_and_only_once_done() -> None:
    leases = CopyLeases()
    events = [FakeEvent(done=True), FakeEvent(), FakeEvent(done=True)]
    for event in events:
        leases.hold(event, object())
    leases.release_finished()
    assert len(leases) == 2, "the second copy is still running; the third waits behind it"
    events[1].done = True
    leases.release_finished()
    assert len(leases) == 0
    leases.hold(FakeEvent(), object())
    leases.wait_all()
    assert len(leases) == 0


def test_page_locking_a_batch_leaves_no_reference_cycle_that_keeps_its_buffer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the caller and the copy lease let go of a batch, its buffer is free at once, not
    when the garbage collector next runs: a cycle held every buffer for a few dozen batches,
    and the workers were handed a new (page-locked anew) buffer for nearly every batch."""
    monkeypatch.setattr(device_module, "page_locked", lambda tensor, locker: (tensor, True))
    feed = DeviceFeed(torch.device("cpu"), pin=("image", "views"))
    image, views = torch.zeros(4), (torch.zeros(2), torch.zeros(2))
    alive = [weakref.ref(t) for t in (image, *views)]
    gc.disable()
    try:
        host, in_place = feed._page_locked({"image": image, "views": views, "label": 1})
        assert len(in_place) == 3 and host["views"][1] is views[1]
        del host, in_place, image, views
        assert all(ref() is None for ref in alive), "a batch tensor outlived its references"
    finally:
        gc.enable()


@needs_memfd
def test_a_buffer_stays_out_of_reuse_until_its_copy_completes() -> None:
    table = SlotTable(64, spare=1)
    ref = table.acquire()
    batch = table.lease(ref.id)
    leases, copying = CopyLeases(), FakeEvent()
    leases.hold(copying, batch)
    del batch  # the caller is done with its batch; the GPU may still be reading it
    gc.collect()
    leases.release_finished()
    other = table.acquire()
    assert other.id != ref.id, "a buffer still being copied went back to the workers"
    table.release(other.id)
    copying.done = True
    leases.release_finished()
    gc.collect()
    assert table.acquire().id == ref.id
    table.close()


@needs_memfd
def test_a_buffer_is_page_locked_once_and_unlocked_before_it_is_unmapped() -> None:
    runtime = FakeRuntime()
    locker = PageLocker(runtime=runtime)
    table = SlotTable(4096, spare=1)
    kept = table.lease(table.acquire().id)
    images = kept[:300].view(10, 10, 3).permute(2, 0, 1)  # what a loader hands out
    address = kept.untyped_storage().data_ptr()
    assert page_locked(images, locker) == (images, True)
    assert page_locked(kept[8:], locker)[1]
    assert runtime.registered == [(address, 4096)], "registered once, as a whole buffer"
    dropped = table.lease(table.acquire().id)
    assert lock_pages(dropped, locker.lock)
    other = dropped.untyped_storage().data_ptr()
    del dropped
    gc.collect()
    table.close()
    assert runtime.unregistered == [other], "a free buffer is unlocked when it is closed"
    del kept, images
    gc.collect()
    assert runtime.unregistered == [other, address], "a viewed one when its last view goes"


def test_only_batch_buffers_are_locked_and_a_refusal_is_said_once() -> None:
    runtime = FakeRuntime()
    assert not lock_pages(torch.zeros(64, dtype=torch.uint8), PageLocker(runtime=runtime).lock)
    assert runtime.registered == []
    taken: list[int] = []
    refusing = PageLocker(runtime=FakeRuntime(refuse=True), take_error=lambda: taken.append(1))
    with pytest.warns(RuntimeWarning, match="cudaHostRegister: out of memory"):
        assert refusing.lock(4096, 4096) is None
    assert taken == [1], "the refusal is taken off CUDA's last error, not left to a kernel"
    assert refusing.lock(8192, 4096) is None  # no second warning (pytest fails on one)


def test_on_the_cpu_the_feed_passes_batches_through() -> None:
    feed = DeviceFeed(torch.device("cpu"), pin=("image",), record_stages=True)
    batches = [(b, {"image": torch.full((2,), b)}) for b in range(3)]
    assert list(feed.batches(iter(batches))) == batches
    assert feed.stream is None and feed.take_stages(0) == {}


# ---------------------------------------------------------------- on a CUDA device


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("feed")
    src = make_image_folder(root / "src", classes=2, per_class=12, size=(60, 40))
    convert("images", src, root / "out", "--short-side", "40")
    return root / "out"


class Stages:
    def __init__(self) -> None:
        self.main: list[dict[str, float]] = []

    def on_batch(self, record: dict) -> None:
        self.main.append(record["main"])


@needs_cuda
@pytest.mark.cuda
def test_cuda_batches_are_the_cpu_batches_while_copies_lag(shards: Path) -> None:
    """Copies held back behind a busy side stream: every buffer the workers refill must have
    been copied already, so each device batch equals the CPU one."""
    with dp.Loader(shards, batch_size=4, num_workers=2, seed=1, transform=CROP) as loader:
        expected = [[b["image"].clone() for b in loader] for _ in range(2)]
    stages = Stages()
    with dp.Loader(shards, batch_size=4, num_workers=2, seed=1, transform=CROP, prefetch=1,
                   device="cuda") as loader:
        loader.observer = stages
        for epoch in range(2):
            for batch, want in zip(loader, expected[epoch], strict=True):
                with torch.cuda.stream(loader._feed.stream):
                    torch.cuda._sleep(20_000_000)  # the next copy queues behind this
                assert batch["image"].is_cuda
                assert torch.equal(batch["image"].cpu(), want)
        assert loader._feed.locker.refusal is None
    assert all({"collate", "pin", "copy", "transform"} <= set(m) for m in stages.main)


@needs_cuda
@pytest.mark.cuda
def test_cuda_normalize_runs_on_the_device_after_a_uint8_copy(shards: Path) -> None:
    norm = dp.image.Normalize()
    with dp.Loader(shards, batch_size=4, num_workers=1, seed=1, transform=CROP | norm) as cpu, \
            dp.Loader(shards, batch_size=4, num_workers=1, seed=1, transform=CROP | norm,
                      device="cuda") as gpu:
        assert gpu.spec.pixel_dtype == "uint8" and gpu.batch_transforms
        for a, b in zip(cpu, gpu, strict=True):
            assert b["image"].is_cuda and b["image"].dtype == torch.float32
            # CUDA divides by 255 as a multiplication by its reciprocal: float rounding apart.
            assert torch.allclose(a["image"], b["image"].cpu(), rtol=1e-6, atol=1e-6)
