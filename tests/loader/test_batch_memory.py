"""Batch buffers are sized by the batch that can exist, and a loader whose buffers cannot fit in
memory is refused when it is made, with the sizes, before any worker starts."""

from __future__ import annotations

from pathlib import Path

import pytest

import datapipe as dp
import datapipe.loader.memory_budget as memory_budget
from datapipe.errors import ArgumentError
from datapipe.loader.memory_budget import available_memory
from tests.conftest import convert
from tests.imagegen import make_image_folder
from tests.loader.helpers import indices_of

CROP = dp.image.CenterCrop(16)
IMAGE_NBYTES = 16 * 16 * 3  # one uint8 sample of CROP
SAMPLES = 24


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("memory")
    src = make_image_folder(root / "src", classes=3, per_class=8, size=(40, 32))
    convert("images", src, root / "out", "--short-side", "24")
    return root / "out"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("memory-text")
    lines = [" ".join(["word"] * (3 + (i * 7) % 40)) for i in range(120)]
    (root / "a.txt").write_text("\n".join(lines) + "\n")
    convert("text", root / "a.txt", root / "out", "--tokenizer", "bytes", "--append-eos")
    return root / "out"


def _corpus_tokens(loader: dp.TokenLoader) -> int:
    return int(loader.lengths.sum())


@pytest.fixture
def memory(monkeypatch: pytest.MonkeyPatch):
    """Set how much memory the budget sees as available."""
    def set_available(nbytes: int | None) -> None:
        monkeypatch.setattr(memory_budget, "available_memory", lambda: nbytes)
    return set_available


# --- sized by what a rank can receive -----------------------------------------------------


@pytest.mark.parametrize(("batch_size", "world", "samples_per_buffer"), [
    (10**9, 1, SAMPLES),  # the whole epoch is one batch of 24
    (10**9, 5, 5),        # each of 5 ranks gets ceil(24 / 5) = 5
    (100_000, 2, 12),
    (7, 1, 7),            # a batch_size below the share is the size
])
def test_image_buffers_hold_the_largest_batch_a_rank_gets(shards: Path, batch_size: int,
                                                           world: int,
                                                           samples_per_buffer: int) -> None:
    with dp.Loader(shards, batch_size=batch_size, num_workers=0, transform=CROP, rank=world - 1,
                   world_size=world) as loader:
        assert loader._producer.slot_nbytes == samples_per_buffer * IMAGE_NBYTES
        assert max(b["image"].shape[0] for b in loader) == samples_per_buffer


def test_a_huge_batch_size_iterates_with_workers_in_buffers_of_the_dataset(shards: Path) -> None:
    """Before, each buffer was sized for 10**9 images (737 GB): the workers were OOM-killed."""
    with dp.Loader(shards, batch_size=10**9, num_workers=2, transform=CROP, seed=3) as loader:
        assert loader._producer.slot_nbytes == SAMPLES * IMAGE_NBYTES  # checked before a fork
        for epoch in range(2):
            loader.set_epoch(epoch)
            batches = list(loader)
            assert len(batches) == 1 and sorted(indices_of(batches)) == list(range(SAMPLES))
        assert loader._producer._pool._slots.nbytes == SAMPLES * IMAGE_NBYTES


def test_normalized_buffers_hold_the_floats_the_workers_write(shards: Path) -> None:
    transform = CROP | dp.image.Normalize(dtype="bfloat16")
    with dp.Loader(shards, batch_size=10**6, num_workers=0, transform=transform) as loader:
        assert loader._producer.slot_nbytes == SAMPLES * IMAGE_NBYTES * 2


@pytest.mark.parametrize(("options", "budget"), [
    ({"max_tokens": 10**12}, None),                      # packed: the corpus, not 4 TB
    ({"max_tokens": 10**12, "layout": "padded"}, None),
    ({"max_tokens": 10**12, "layout": "fixed", "seq_len": 64}, None),
    ({"batch_size": 10**9}, None),
    ({"max_tokens": 256}, 256),                          # a budget below the corpus is the size
    ({"max_tokens": 256, "layout": "fixed", "seq_len": 64}, 256),
])
def test_token_buffers_hold_at_most_the_corpus(corpus: Path, options: dict,
                                               budget: int | None) -> None:
    with dp.TokenLoader(corpus, num_workers=0, **options) as loader:
        tokens = budget or _corpus_tokens(loader)
        assert loader._producer.slot_nbytes == tokens * loader.token_dtype.itemsize
        assert max(int(b["num_real_tokens"]) for b in loader) <= tokens


# --- refused when it cannot fit -----------------------------------------------------------


def test_buffers_beyond_available_memory_are_refused_before_any_worker(
        shards: Path, memory) -> None:
    buffer = SAMPLES * IMAGE_NBYTES  # 18 KB
    memory(6 * buffer - 1)  # 2 workers x prefetch 2 + 2 spare = 6 buffers
    with pytest.raises(ArgumentError) as refused:
        dp.Loader(shards, batch_size=10**9, num_workers=2, prefetch=2, transform=CROP)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"Loader('{shards}'): a batch of 24 images of 16x16x3 uint8 takes "
                              "18.0 KB, and 6 such buffers (2 workers x prefetch 2 in flight, "
                              "+ 2 spare) need 108.0 KB, but only 108.0 KB")
    assert message.endswith("lower batch_size, the crop size, num_workers or prefetch")
    memory(6 * buffer)
    with dp.Loader(shards, batch_size=10**9, num_workers=2, prefetch=2, transform=CROP) as fits:
        assert fits.worker_pids == [], "no worker before the first batch"


def test_a_refused_loader_started_no_process(shards: Path, memory) -> None:
    import multiprocessing

    memory(1)
    before = set(multiprocessing.active_children())
    with pytest.raises(ArgumentError, match="of memory is available"):
        dp.Loader(shards, batch_size=4, num_workers=2, transform=CROP)
    assert set(multiprocessing.active_children()) == before


def test_without_workers_two_buffers_are_counted(shards: Path, memory) -> None:
    memory(2 * 4 * IMAGE_NBYTES - 1)
    with pytest.raises(ArgumentError, match=r"2 such buffers \(the batch being built and the "
                                            r"one the caller holds\)"):
        dp.Loader(shards, batch_size=4, num_workers=0, transform=CROP)


def test_a_crop_too_large_for_memory_is_refused_with_the_sizes(shards: Path) -> None:
    """RandomResizedCrop(100000) killed a worker: 30 GB per image, refused on any machine that
    has less than 24 x 6 of them available."""
    huge = dp.image.RandomResizedCrop(100_000)
    with pytest.raises(ArgumentError, match=r"a batch of 24 images of 100000x100000x3 uint8 takes "
                                            r"670\.6 GB, and 6 such buffers .* need 3\.9 TB, "
                                            r"but only .* of memory is available"):
        dp.Loader(shards, batch_size=256, num_workers=2, transform=huge)


def test_token_buffers_beyond_available_memory_are_refused(corpus: Path, memory) -> None:
    memory(10)
    with pytest.raises(ArgumentError, match=r"TokenLoader\(.*\): a batch of up to 256 tokens "
                                            r"\(uint16\) takes 512 B, and 10 such buffers "
                                            r"\(2 workers x prefetch 4 in flight, \+ 2 spare\) "
                                            r"need 5\.0 KB, but only 10 B"):
        dp.TokenLoader(corpus, max_tokens=256, num_workers=2)


def test_unknown_available_memory_checks_nothing(shards: Path, memory) -> None:
    memory(None)  # no /proc/meminfo (macOS)
    with dp.Loader(shards, batch_size=4, num_workers=0, transform=CROP) as loader:
        assert len(loader) == 6


def test_available_memory_is_read_from_this_machine() -> None:
    available = available_memory()
    assert available is None or 0 < available < 1 << 50
