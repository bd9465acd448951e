"""dp.PatchLoader over several image datasets mixed by weight, by images or by patches: real
converted photos of many sizes, real workers; each image's `source` and `index` checked
against its own dataset's grid, shares, passes, phases, ranks and resume."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import datapipe as dp
from datapipe.errors import ArgumentError, DataError
from datapipe.loader.patch_epochs import PatchCounts
from tests.conftest import convert
from tests.loader.helpers import check_resume_at_every_step, run_world
from tests.loader.patch_data import make_patch_dataset, make_photos

COUNTS = {"small": 24, "large": 10}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """24 small photos (20-160 px a side, tens of patches) and 10 large ones (160-400 px,
    hundreds): by images and by patches, the same weights give other shares."""
    root = tmp_path_factory.mktemp("patch-mix")
    rng = np.random.default_rng(11)
    out = {}
    for s, (name, (low, high)) in enumerate({"small": (20, 160), "large": (160, 400)}.items()):
        sizes = [(int(w), int(h)) for w, h in rng.integers(low, high, (COUNTS[name], 2))]
        out[name] = make_patch_dataset(root / name, sizes, seed=s)
    return out


def qwen(path: Any, **kw: Any) -> dp.PatchLoader:
    return dp.PatchLoader(path, "qwen2_vl", **{"max_patches": 1024, **kw})


def siglip(path: Any, **kw: Any) -> dp.PatchLoader:
    return dp.PatchLoader(path, "siglip2", **{"batch_size": 4, "max_num_patches": 64, **kw})


def images(batches: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(source, index) of every real image, in order."""
    return [(int(s), int(i)) for b in batches
            for s, i in zip(b["source"][~b["is_padding"]], b["index"][~b["is_padding"]],
                            strict=True)]


def grids_of(path: Path) -> dict[int, list[int]]:
    """Each image's grid read by a loader over its dataset alone."""
    with qwen(path, shuffle=False) as alone:
        return {i: g for b in alone for i, g in zip(b["index"].tolist(),
                                                    b["image_grid_thw"].tolist(), strict=True)}


def patches_of(grids: dict[int, list[int]]) -> dict[int, int]:
    return {i: g[1] * g[2] for i, g in grids.items()}


@pytest.mark.parametrize("workers", [0, 2])
def test_every_image_of_every_source_once_with_its_own_grid(data: dict[str, Path],
                                                           workers: int) -> None:
    """No weights: each epoch is one pass over every source, mixed in the same batches."""
    own = [grids_of(data["small"]), grids_of(data["large"])]
    with qwen(data, num_workers=workers) as mixed:
        batches = list(mixed)
        assert len(mixed) == len(batches)
    seen = images(batches)
    assert sorted(seen) == sorted((s, i) for s, n in enumerate(COUNTS.values())
                                  for i in range(n))
    for batch in batches:
        assert batch["source"].dtype == torch.int64
        assert batch["source"].shape == batch["index"].shape
        assert batch["num_patches"] <= 1024
        for s, i, grid in zip(batch["source"].tolist(), batch["index"].tolist(),
                              batch["image_grid_thw"].tolist(), strict=True):
            assert grid == own[s][i]
    assert sum(len(set(b["source"].tolist())) > 1 for b in batches) >= 1  # mixed in a batch


def test_weights_by_images_give_each_source_its_share(data: dict[str, Path]) -> None:
    with qwen(data, weights={"small": 3, "large": 1}, epoch_size=32, seed=3) as mixed:
        batches = list(mixed)
        progress = mixed.progress()
    count = Counter(s for s, _ in images(batches))
    assert (count[0], count[1]) == (24, 8)
    assert progress["small"]["images"] == 24 and progress["large"]["images"] == 8
    assert len(set(images(batches))) == 32  # no image twice within its source's pass


def test_weights_by_patches_give_each_source_its_share(data: dict[str, Path]) -> None:
    """Weights in proportion to two passes over the small images' patches and one over the
    large ones': exactly those passes, though by images the same weights would differ."""
    small, large = (patches_of(grids_of(data[n])) for n in COUNTS)
    totals = sum(small.values()), sum(large.values())
    weights = {"small": 2 * totals[0], "large": totals[1]}
    with qwen(data, weights=weights, weight_by="patches", epoch_size=2 * totals[0] + totals[1],
              seed=5) as mixed:
        batches = list(mixed)
        progress = mixed.progress()
    count = Counter(images(batches))
    assert all(count[0, i] == 2 for i in range(24)) and all(count[1, i] == 1 for i in range(10))
    assert progress == {"small": {"images": 48, "patches": 2 * totals[0]},
                        "large": {"images": 10, "patches": totals[1]}}
    assert sum(b["num_patches"] for b in batches) == 2 * totals[0] + totals[1]


def test_a_sources_patch_total_is_counted_once_per_node(data: dict[str, Path], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A mixture by patches needs each source's total: counted by the first loader, kept beside
    its shards, read by the next (which counts nothing); a kept total of another image count is
    counted again."""
    copies = {n: Path(shutil.copytree(data[n], tmp_path / n)) for n in COUNTS}
    qwen(copies, weights=[1, 1], weight_by="patches").close()
    kept = {n: list(copies[n].glob(".datapipe-patch-total-*.json")) for n in COUNTS}
    assert all(len(files) == 1 for files in kept.values()), kept
    small, large = (patches_of(grids_of(data[n])) for n in COUNTS)
    assert json.loads(kept["small"][0].read_text()) == {"images": 24,
                                                         "patches": sum(small.values())}
    assert json.loads(kept["large"][0].read_text())["patches"] == sum(large.values())

    def no_count(self: Any) -> int:
        raise AssertionError("a kept total was counted again")

    monkeypatch.setattr(PatchCounts, "total", no_count)
    qwen(copies, weights=[1, 1], weight_by="patches").close()  # read, not counted
    kept["small"][0].write_text(json.dumps({"images": 23, "patches": 1}))
    with pytest.raises(AssertionError, match="counted again"):
        qwen(copies, weights=[1, 1], weight_by="patches")


def test_progress_counts_the_batches_handed_out_per_source(data: dict[str, Path]) -> None:
    own = [patches_of(grids_of(data[n])) for n in COUNTS]
    with qwen(data, num_workers=2) as mixed:
        it = iter(mixed)
        head = [next(it) for _ in range(2)]
        progress = mixed.state_dict()["progress"]
    drawn = images(head)
    for s, name in enumerate(COUNTS):
        mine = [i for src, i in drawn if src == s]
        assert progress[name] == {"images": len(mine), "patches": sum(own[s][i] for i in mine)}


@pytest.mark.parametrize("make", [qwen, siglip], ids=["packed", "padded"])
def test_resume_at_every_step_is_exact(data: dict[str, Path], make: Any) -> None:
    check_resume_at_every_step(lambda: make(data, weights={"small": 1, "large": 1},
                                            epoch_size=24, flip=True), epoch=1)


def test_resume_by_patches_with_workers_is_exact(data: dict[str, Path]) -> None:
    check_resume_at_every_step(lambda: qwen(data, weights=[1, 2], weight_by="patches",
                                            num_workers=2, max_patches=2048))


def test_two_ranks_take_equal_steps_and_every_image_once(data: dict[str, Path]) -> None:
    ranks, _ = run_world(lambda **kw: qwen(data, **kw), 2, None)
    assert len(ranks[0]) == len(ranks[1])
    seen = [pair for batches in ranks for pair in images(batches)]
    assert sorted(seen) == sorted((s, i) for s, n in enumerate(COUNTS.values())
                                  for i in range(n))


def test_elastic_resume_at_another_world_size_sees_the_rest_once(data: dict[str, Path]) -> None:
    def make(**kw: Any) -> dp.PatchLoader:
        return siglip(data, weights={"small": 1, "large": 1}, epoch_size=20, **kw)

    before, state = run_world(make, 2, None, steps=1)
    after, _ = run_world(make, 3, state)
    seen = Counter(pair for batches in before + after for pair in images(batches))
    assert sum(seen.values()) == 20
    assert Counter(s for s, _ in seen.elements()) == {0: 10, 1: 10}
    assert max(seen.values()) == 1  # within a source's pass, no image twice


def test_phases_by_step_switch_sources(data: dict[str, Path]) -> None:
    """Padded batches hold a fixed number of images, so a phase by step begins at its batch
    (a planning window of one batch: a window's batches are shuffled among themselves)."""
    phases = [(0, {"small": 1, "large": 0}), (2, {"small": 0, "large": 1})]
    with siglip(data, weights=phases, epoch_size=16, plan_window=4) as mixed:
        sources = [set(b["source"].tolist()) for b in mixed]
    assert sources == [{0}, {0}, {1}, {1}]
    check_resume_at_every_step(lambda: siglip(data, weights=phases, epoch_size=16,
                                              plan_window=4))
    # Packed by patches: the phase begins 2 x max_patches patches into the run.
    with qwen(data, weights=phases, weight_by="patches", epoch_size=4096,
              plan_window=4) as mixed:
        order = [s for s, _ in images(list(mixed))]
    first_large, last_small = order.index(1), len(order) - 1 - order[::-1].index(0)
    assert order[0] == 0 and order[-1] == 1
    assert last_small - first_large < 4  # mixed within the one window astride the switch


def test_a_state_of_other_weights_is_refused_or_reweighted(data: dict[str, Path]) -> None:
    with qwen(data, weights=[1, 1]) as mixed:
        it = iter(mixed)
        next(it)
        state = json.loads(json.dumps(mixed.state_dict()))
    assert state["identity"]["weight_by"] == "images"
    with qwen(data, weights=[1, 3]) as other, pytest.raises(ArgumentError, match="weights"):
        other.load_state_dict(state)
    with qwen(data, weights=[1, 1], weight_by="patches") as other, \
            pytest.raises(ArgumentError, match="weight_by"):
        other.load_state_dict(state)
    with qwen(data, weights=[1, 3], reweight=True) as other:
        other.load_state_dict(state)
        assert list(other)


def test_bad_mixtures_are_refused_in_one_line(data: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("some text\n")
    convert("text", tmp_path / "a.txt", tmp_path / "text", "--tokenizer", "bytes")
    with pytest.raises(DataError, match=rf"^{re.escape(str(tmp_path / 'text'))}: a text "
                                        r"dataset; PatchLoader reads images$"):
        qwen([data["small"], tmp_path / "text"])
    sizeless = tmp_path / "sizeless"
    shutil.copytree(data["large"], sizeless)
    manifest = json.loads((sizeless / "manifest.json").read_text())
    manifest["columns"] = [c for c in manifest["columns"] if c["name"] not in ("height", "width")]
    (sizeless / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=rf"^{re.escape(str(sizeless))}: no stored image sizes "
                                        r"\(no column 'height'\)"):
        qwen({"small": data["small"], "sizeless": sizeless})
    with pytest.raises(ArgumentError, match=r"^weight_by must be one of images, patches, got "
                                            r"'tokens'$"):
        qwen(data, weight_by="tokens")
    with pytest.raises(ArgumentError, match=r"phases by step with weight_by='images' need a "
                                            r"fixed number of images a step"):
        qwen(data, weights=[(0, [1, 0]), (2, [0, 1])])
    with pytest.raises(ArgumentError, match=rf"^{re.escape(str(data['large']))}: image \d+ has "
                                            r"\d+ patches, more than max_patches=300"):
        qwen(data, max_patches=300)


def test_datasets_of_other_classes_are_renumbered_with_classes(data: dict[str, Path],
                                                               tmp_path: Path) -> None:
    make_photos(tmp_path / "src" / "dogs", [(64, 48), (48, 64), (100, 90)])
    convert("images", tmp_path / "src", tmp_path / "dogs", "--short-side", "0")
    paths = {"small": data["small"], "dogs": tmp_path / "dogs"}
    with pytest.raises(ArgumentError, match=r"cannot be mixed: classes .*classes='union'"):
        qwen(paths)
    with qwen(paths, classes="union") as mixed:
        assert mixed.classes == ("class_0", "dogs")
        labels = {s: set() for s in (0, 1)}
        for batch in mixed:
            for s, label in zip(batch["source"].tolist(), batch["label"].tolist(),
                                strict=True):
                labels[s].add(label)
    assert labels == {0: {0}, 1: {1}}


def test_a_corrupt_image_is_named_by_its_own_dataset(data: dict[str, Path],
                                                     tmp_path: Path) -> None:
    """A mixture's sources may have shards of one name: the error gives the shard's whole path
    and the image's id within its own dataset."""
    make_photos(tmp_path / "src" / "class_0", [(64, 48), (80, 40), (50, 70)])
    convert("images", tmp_path / "src", tmp_path / "broken", "--short-side", "0", "--format",
            "msgpack")
    shard = next((tmp_path / "broken").glob("shard-*"))
    raw = bytearray(shard.read_bytes())
    start = raw.find(b"\xff\xd8\xff")  # the first JPEG in the shard: break its header
    raw[start:start + 40] = b"\x00" * 40
    shard.write_bytes(bytes(raw))
    paths = [data["small"], tmp_path / "broken"]
    with qwen(paths) as mixed, pytest.raises(DataError) as err:
        list(mixed)
    assert f"{shard} row 0 (sample 0): cannot decode" in str(err.value)
