"""What a Loader's plan costs the training process: nothing that grows with the dataset when it
saves a state or counts its progress, and progress that counts what all ranks drew, across
resumes at other world sizes."""

from __future__ import annotations

import math
import tracemalloc
from pathlib import Path

import pytest

import datapipe as dp
from datapipe.suite.groups.scale_peers import write_images
from tests.loader.helpers import run_world

BIG = 200_000  # tiny images: an epoch-sized array of them is megabytes, the plan is not
SMALL = 23
CROP = dp.image.CenterCrop(8)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("plan-cost")
    for name, count in (("big", BIG), ("small", SMALL)):
        write_images(root / name, count)
    return {"big": root / "big" / "dataset", "small": root / "small" / "dataset"}


def _peak_bytes(call) -> int:
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_saving_and_restoring_a_state_allocates_nothing_per_sample(
        data: dict[str, Path]) -> None:
    with dp.Loader(data["big"], batch_size=256, num_workers=0, rank=3, world_size=8,
                   transform=CROP) as loader:
        batches = iter(loader)
        next(batches), next(batches)
        state: dict = {}
        assert _peak_bytes(lambda: state.update(loader.state_dict())) < 200_000
        assert state["progress"] == {str(data["big"]): {"samples": 2 * 256 * 8}}
    with dp.Loader(data["big"], batch_size=256, num_workers=0, rank=0, world_size=5,
                   transform=CROP) as again:
        assert _peak_bytes(lambda: again.load_state_dict(state)) < 200_000
        assert _peak_bytes(again.progress) < 200_000
        assert len(again) == math.ceil((BIG - 2 * 256 * 8) / 5 / 256)


def test_progress_counts_every_ranks_samples_across_resumes(data: dict[str, Path]) -> None:
    def make(**rank: int) -> dp.Loader:
        return dp.Loader(data["small"], batch_size=3, num_workers=0, transform=CROP, **rank)

    def drawn(state: dict) -> int:
        return state["progress"][str(data["small"])]["samples"]

    seen = 0
    state = None
    for world, steps in ((2, 2), (3, 1), (1, None)):
        batches, state = run_world(make, world, state, steps)
        seen += sum(int((~b["is_padding"]).sum()) for rank in batches for b in rank)
        assert drawn(state) == seen, (world, steps)
    assert seen == SMALL
    batches, state = run_world(make, 4, state, 1)
    assert drawn(state) == SMALL + 4 * 3, "the epochs before whole, then this one's draws"
