"""A state saved at one world size, loaded at another, in one process: one loader per rank
with explicit rank and world_size (tests/loader/test_elastic_processes.py runs the same under
real process groups). Rank 0's state is all the new ranks get, as from a framework's checkpoint.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import datapipe as dp
from datapipe.errors import ArgumentError
from tests.conftest import convert
from tests.imagegen import make_image_folder
from tests.loader.helpers import run_world

NUM_IMAGES = 23
CROP = dp.image.CenterCrop(16)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("elastic")
    src = make_image_folder(root / "src", classes=1, per_class=NUM_IMAGES, size=(24, 24))
    convert("images", src, root / "images", "--short-side", "16")
    rng = np.random.default_rng(3)
    lines = ["w" * int(n) for n in rng.integers(1, 40, 60)]
    (root / "docs.txt").write_text("\n".join(lines) + "\n")
    convert("text", root / "docs.txt", root / "tokens", "--tokenizer", "bytes", "--append-eos")
    return {"images": root / "images", "tokens": root / "tokens"}


def images(path: Path, drop_last: bool = False, seed: int = 0) -> Callable[..., dp.Loader]:
    return lambda **rank: dp.Loader(path, batch_size=3, num_workers=0, transform=CROP,
                                    drop_last=drop_last, seed=seed, **rank)


def real_images(ranks: list[list[dict[str, Any]]]) -> list[int]:
    return [i for batches in ranks for b in batches for i in b["index"][~b["is_padding"]].tolist()]


@pytest.mark.parametrize("worlds, steps", [((2, 3), (2,)), ((3, 2), (1,)), ((2, 3, 2), (1, 1)),
                                           ((1, 4), (3,)), ((2, 2, 3), (1, 1))])
def test_images_resume_at_another_world_size_see_the_rest_once(
        data: dict[str, Path], worlds: tuple[int, ...], steps: tuple[int, ...]) -> None:
    make = images(data["images"])
    seen, state = [], None
    for world, k in zip(worlds[:-1], steps, strict=True):
        batches, state = run_world(make, world, state, k)
        seen += real_images(batches)
    last, after = run_world(make, worlds[-1], state)
    seen += real_images(last)
    assert Counter(seen) == Counter(range(NUM_IMAGES)), "every sample of the epoch once"
    assert after["epoch_finished"] and after["identity"]["world_size"] == worlds[-1]
    next_epoch, _ = run_world(make, worlds[-1], after)
    fresh, _ = run_world(make, worlds[-1], None, epoch=1)
    assert [[b["index"].tolist() for b in r] for r in next_epoch] == \
        [[b["index"].tolist() for b in r] for r in fresh], "then an ordinary epoch"


def test_images_with_drop_last_see_the_rest_at_most_once(data: dict[str, Path]) -> None:
    make = images(data["images"], drop_last=True)
    first, state = run_world(make, 2, None, 1)
    rest, _ = run_world(make, 4, state)
    seen = Counter(real_images(first) + real_images(rest))
    assert max(seen.values()) == 1
    assert all(len(b["index"]) == 3 for r in rest for b in r), "only full batches"
    # 23 - 6 drawn = 17 left: 5 per rank at 4, one full batch of 3 each, so 12 more are seen.
    assert len(seen) == 6 + 12


def test_a_state_moves_to_another_rank_of_the_same_world(data: dict[str, Path]) -> None:
    """A rank's counters are the global position: rank 1 continues with its own batches."""
    make = images(data["images"])
    _, state = run_world(make, 2, None, 2)
    with make(rank=1, world_size=2) as reference:
        expected = [b["index"].tolist() for b in reference][2:]
    with make(rank=1, world_size=2) as loader:
        loader.load_state_dict(state)
        assert [b["index"].tolist() for b in loader] == expected


def test_a_resumed_state_says_its_segments_and_states_without_a_fingerprint_load(
        data: dict[str, Path]) -> None:
    make = images(data["images"])
    _, state = run_world(make, 2, None, 1)
    assert "segments" not in state and state["version"] == 5, "no segments when not elastic"
    _, resumed = run_world(make, 3, state, 1)
    assert resumed["version"] == 5
    assert resumed["segments"] == [{"world_size": 2, "batches_done": 1}]
    assert resumed["batches_done"] == 1 and resumed["identity"]["world_size"] == 3
    old = {**state, "identity": {k: v for k, v in state["identity"].items() if k != "manifest"}}
    batches, _ = run_world(make, 3, old)
    assert len(real_images(batches)) == NUM_IMAGES - 6


@pytest.mark.parametrize(("change", "message"), [
    ({"seed": 4}, r"other settings \(seed 4 -> 0\)"),
    ({"batch_size": 4}, r"other settings \(batch_size 4 -> 3\)"),
    ({"shuffle": False}, r"other settings \(shuffle False -> True\)"),
    ({"manifest": "0" * 16}, "saved over another dataset"),
    ({"world_size": 0}, "rank 1 / world_size 0 are impossible"),
    ({"rank": 2}, "rank 2 / world_size 2 are impossible"),
])
def test_only_rank_and_world_size_may_change(data: dict[str, Path], change: dict[str, Any],
                                             message: str) -> None:
    with images(data["images"])(rank=1, world_size=2) as loader:
        next(iter(loader))
        state = loader.state_dict()
    with images(data["images"])(rank=0, world_size=3) as other:
        other.load_state_dict(state)  # as saved: welcome at another world size
        changed = {**state, "identity": {**state["identity"], **change}}
        with pytest.raises(ArgumentError, match=message) as err:
            other.load_state_dict(changed)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("change", "message"), [
    ({"batches_done": 5}, "says 5 batches of epoch 0 were done, but that epoch has 4"),
    ({"segments": [{"world_size": 3, "batches_done": 4}]},
     r"4 batches of epoch 0 were done at world_size 3 \(segment 0\), but that segment has 3"),
    ({"segments": [{"world_size": 3, "batches_done": 1}], "batches_done": 4},
     r"says 4 batches of epoch 0 were done, but that epoch has 3 \(after 1 earlier segments\)"),
    ({"segments": "all"}, "segments must be a list"),
])
def test_counters_impossible_at_their_world_size_are_refused(data: dict[str, Path],
                                                             change: dict[str, Any],
                                                             message: str) -> None:
    """23 samples at 2 ranks: 12 each, 4 batches of 3; at 3 ranks, 8 each: 3 batches."""
    _, state = run_world(images(data["images"]), 2, None, 1)
    with images(data["images"])(rank=0, world_size=3) as loader, \
            pytest.raises(ArgumentError, match=message):
        loader.load_state_dict({**state, **change})


# --- text ----------------------------------------------------------------------------------

TOKEN_LAYOUTS = {"packed": {"max_tokens": 50}, "padded": {"max_tokens": 96},
                 "fixed": {"max_tokens": 80, "seq_len": 40}}  # seq_len: no document is split


def tokens(path: Path, layout: str, window: int | None = None) -> Callable[..., dp.TokenLoader]:
    return lambda **rank: dp.TokenLoader(path, layout=layout, num_workers=0, seed=1,
                                         plan_window=window, **TOKEN_LAYOUTS[layout], **rank)


def tokens_per_document(ranks: list[list[dict[str, Any]]], layout: str) -> Counter:
    """Real tokens each document contributed (packed splits documents between batches)."""
    counted: Counter = Counter()
    for batch in (b for r in ranks for b in r if not b["is_padding"]):
        docs = [d for d in batch["index"].tolist() if d >= 0]  # -1: a fixed row's free tail
        if layout == "packed":
            sizes = np.diff(batch["cu_seqlens"].numpy())[:len(docs)]
        elif layout == "padded":
            sizes = batch["attention_mask"].sum(1).numpy()
        else:  # one piece per document (seq_len holds the longest)
            sizes = [None] * len(docs)
        for doc, size in zip(docs, sizes, strict=True):
            counted[doc] += 1 if size is None else int(size)
    return counted


@pytest.mark.parametrize("window", [None, 7])  # 7: the 60 documents in 9 planning windows
@pytest.mark.parametrize("layout", TOKEN_LAYOUTS)
@pytest.mark.parametrize("worlds, steps", [((2, 3), (2,)), ((3, 2), (1,)), ((2, 3, 2), (1, 1))])
def test_tokens_resume_at_another_world_size_see_the_rest_once(
        data: dict[str, Path], layout: str, worlds: tuple[int, ...],
        steps: tuple[int, ...], window: int | None) -> None:
    make = tokens(data["tokens"], layout, window)
    with make(rank=0, world_size=1) as single:
        whole = tokens_per_document([list(single)], layout)
    assert len(whole) == 60
    seen, state = Counter(), None
    for world, k in zip(worlds[:-1], steps, strict=True):
        batches, state = run_world(make, world, state, k)
        seen += tokens_per_document(batches, layout)
    last, after = run_world(make, worlds[-1], state)
    seen += tokens_per_document(last, layout)
    assert seen == whole, "every token of every document once"
    assert after["epoch_finished"]
    next_epoch, _ = run_world(make, worlds[-1], after)
    fresh, _ = run_world(make, worlds[-1], None, epoch=1)
    assert [[b["index"].tolist() for b in r] for r in next_epoch] == \
        [[b["index"].tolist() for b in r] for r in fresh], "then an ordinary epoch"


def test_a_state_loaded_after_an_epoch_is_not_served_the_next_epoch_started_early(
        data: dict[str, Path]) -> None:
    """Workers start on epoch 1's fresh plan during epoch 0; a state for epoch 1 from another
    world size loaded then must get its own plan, not that work."""
    _, state = run_world(images(data["images"]), 2, None, 1, epoch=1)
    with images(data["images"])(rank=0, world_size=3) as inline:
        inline.load_state_dict(state)
        expected = [b["index"].tolist() for b in inline]
    with dp.Loader(data["images"], batch_size=3, num_workers=1, transform=CROP, rank=0,
                   world_size=3) as loader:
        list(loader)
        assert loader._producer._carry is not None, "epoch 1 started during epoch 0"
        loader.load_state_dict(state)
        assert [b["index"].tolist() for b in loader] == expected
