"""load_state_dict refuses what it cannot continue: another dataset, nonsense counters, with a
one-line ArgumentError; states saved before the dataset's fingerprint was stored still load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import datapipe as dp
from datapipe.errors import ArgumentError
from tests.conftest import convert
from tests.imagegen import make_image_folder

CROP = dp.image.CenterCrop(16)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two image datasets of 12 samples each (other pixels), and two text ones."""
    root = tmp_path_factory.mktemp("state")
    out = {}
    for seed in (0, 1):
        src = make_image_folder(root / f"src{seed}", classes=2, per_class=6, size=(40, 32),
                                seed=seed)
        convert("images", src, root / f"images{seed}", "--short-side", "24")
    out["a"], out["b"] = root / "images0", root / "images1"
    (root / "a.txt").write_text("\n".join(" ".join(["w"] * (i % 9 + 2)) for i in range(50)))
    convert("text", root / "a.txt", root / "tokens", "--tokenizer", "bytes")
    (root / "b.txt").write_text("\n".join(" ".join(["v"] * (i % 5 + 3)) for i in range(30)))
    convert("text", root / "b.txt", root / "tokens2", "--tokenizer", "bytes")
    out["tokens"], out["tokens2"] = root / "tokens", root / "tokens2"
    return out


def images(path: Path) -> dp.Loader:
    return dp.Loader(path, batch_size=5, num_workers=0, transform=CROP)


def saved_after(path: Path, batches: int) -> dict[str, Any]:
    with images(path) as loader:
        it = iter(loader)
        for _ in range(batches):
            next(it)
        return json.loads(json.dumps(loader.state_dict()))


def test_a_state_from_another_dataset_of_the_same_size_is_refused(
        datasets: dict[str, Path]) -> None:
    state = saved_after(datasets["a"], 1)
    with images(datasets["b"]) as other, \
            pytest.raises(ArgumentError, match="saved over another dataset"):
        other.load_state_dict(state)
    with dp.TokenLoader(datasets["tokens"], max_tokens=64) as tokens:
        token_state = tokens.state_dict()
    token_state["identity"]["manifest"] = state["identity"]["manifest"]
    with dp.TokenLoader(datasets["tokens"], max_tokens=64) as tokens, \
            pytest.raises(ArgumentError, match="saved over another dataset"):
        tokens.load_state_dict(token_state)


@pytest.mark.parametrize(("change", "message"), [
    ({"batches_done": -5}, "batches_done must be a non-negative integer, got -5"),
    ({"batches_done": "2"}, "batches_done must be a non-negative integer"),
    ({"batches_done": 1.5}, "batches_done must be a non-negative integer"),
    ({"batches_done": True}, "batches_done must be a non-negative integer"),
    ({"batches_done": 4}, "says 4 batches of epoch 0 were done, but that epoch has 3"),
    ({"epoch": -1}, "epoch must be a non-negative integer"),
    ({"epoch": None}, "epoch must be a non-negative integer, got None"),
    ({"epoch_finished": "yes"}, "epoch_finished must be true or false"),
    ({"epoch_finished": True}, r"says 1 batches of epoch 0 were done \(all of them\)"),
    ({"identity": None}, "the state has no identity"),
])
def test_nonsense_counters_are_refused_in_one_line(datasets: dict[str, Path],
                                                   change: dict[str, Any], message: str) -> None:
    state = {**saved_after(datasets["a"], 1), **change}
    with images(datasets["a"]) as loader, pytest.raises(ArgumentError, match=message) as err:
        loader.load_state_dict(state)
    assert "\n" not in str(err.value) and str(err.value).startswith("load_state_dict:")


@pytest.mark.parametrize("version", [1, 2])
def test_a_state_from_the_whole_epoch_planner_is_refused_in_one_line(
        datasets: dict[str, Path], version: int) -> None:
    """States of versions 1 and 2 name positions in the orders planned a whole epoch at a
    time (a permutation array): this planner's order differs, so they cannot continue."""
    old = {"version": version, "epoch": 0, "batches_done": 1, "epoch_finished": False,
           "identity": {"num_samples": 12, "batch_size": 5, "shuffle": True, "seed": 0,
                        "rank": 0, "world_size": 1, "drop_last": False}}
    with images(datasets["a"]) as loader, \
            pytest.raises(ArgumentError, match=f"version {version}.*sample order differs"):
        loader.load_state_dict(old)


def test_a_version_3_state_loads_over_one_dataset_and_is_refused_over_a_mixture(
        datasets: dict[str, Path]) -> None:
    """Version 4 changed mixtures' orders only (keyed streams, token mixtures in windows): a
    version 3 state over one dataset names the same order and continues; over a mixture, not."""
    one = {**saved_after(datasets["a"], 1), "version": 3}
    with images(datasets["a"]) as loader:
        loader.load_state_dict(one)
        assert next(iter(loader))["index"].tolist() == after_one(datasets["a"])
    with dp.TokenLoader([datasets["tokens"], datasets["tokens2"]], max_tokens=64) as mixed:
        next(iter(mixed))
        state = {**json.loads(json.dumps(mixed.state_dict())), "version": 3}
        with pytest.raises(ArgumentError, match=r"version 3.*mixture order differs") as err:
            mixed.load_state_dict(state)
    assert "\n" not in str(err.value)


def test_a_version_4_state_loads_but_a_shuffled_padded_one_is_refused(
        datasets: dict[str, Path]) -> None:
    """Version 5 changed the padded layout's order only (even mega-batches in each window): a
    version 4 state of another layout continues, a shuffled padded one is refused."""
    for layout, refused in (("packed", False), ("padded", True)):
        with dp.TokenLoader(datasets["tokens"], max_tokens=64, layout=layout) as loader:
            it = iter(loader)
            next(it)
            state = {**json.loads(json.dumps(loader.state_dict())), "version": 4}
            expected = next(it)["index"].tolist()
        with dp.TokenLoader(datasets["tokens"], max_tokens=64, layout=layout) as loader:
            if refused:
                with pytest.raises(ArgumentError, match=r"version 4.*padded batches' order "
                                                        "differs") as err:
                    loader.load_state_dict(state)
                assert "\n" not in str(err.value)
            else:
                loader.load_state_dict(state)
                assert next(iter(loader))["index"].tolist() == expected


def after_one(path: Path) -> list[int]:
    with images(path) as loader:
        it = iter(loader)
        next(it)
        return next(it)["index"].tolist()


@pytest.mark.parametrize(("layout", "setting", "values"), [
    ("padded", "bucket_batches", (64, 2)),
    ("fixed", "pack_window", (16384, 8)),
])
def test_a_token_state_with_other_batch_shaping_settings_is_refused(
        datasets: dict[str, Path], layout: str, setting: str, values: tuple[int, int]) -> None:
    """Settings that change a layout's batches name the state; states saved before they did
    still load."""
    def tokens(value: int) -> dp.TokenLoader:
        return dp.TokenLoader(datasets["tokens"], max_tokens=64, seq_len=16, layout=layout,
                              **{setting: value})

    with tokens(values[0]) as loader:
        next(iter(loader))
        state = json.loads(json.dumps(loader.state_dict()))
    with tokens(values[1]) as other, \
            pytest.raises(ArgumentError, match=f"{setting} {values[0]} -> {values[1]}"):
        other.load_state_dict(state)
    del state["identity"][setting]
    with tokens(values[1]) as other:
        other.load_state_dict(state)
