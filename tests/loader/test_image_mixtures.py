"""dp.Loader over several image datasets mixed by weight: real converted datasets, real
workers, the batches' `source` and `index` checked against each dataset's own labels."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import datapipe as dp
from datapipe.errors import ArgumentError, DataError
from datapipe.format import Dataset
from datapipe.format.stamped_files import mapped_file
from tests.conftest import convert
from tests.imagegen import make_image_folder
from tests.loader.helpers import check_resume_at_every_step, run_world
from tests.s3server import upload_directory

CROP = dp.image.CenterCrop(16)
SIZES = {"big": 30, "mid": 12, "rare": 4}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three image datasets of 30, 12 and 4 samples (labels 0..2 in each), a text one, and one
    of another image size with other classes."""
    root = tmp_path_factory.mktemp("mix")
    out = {}
    for name, n in SIZES.items():
        src = make_image_folder(root / f"src-{name}", classes=2, per_class=n // 2, size=(24, 24))
        convert("images", src, root / name, "--short-side", "16", "--shard-size", "4KB")
        out[name] = root / name
    # The same photos as "mid", in other shards: another dataset to a saved state.
    convert("images", root / "src-mid", root / "mid-again", "--short-side", "16")
    other = make_image_folder(root / "src-other", classes=5, per_class=2, size=(24, 24))
    convert("images", other, root / "other", "--short-side", "16")
    (root / "docs.txt").write_text("a b c\nd e\n")
    convert("text", root / "docs.txt", root / "tokens", "--tokenizer", "bytes")
    return {**out, "other": root / "other", "tokens": root / "tokens",
            "mid-again": root / "mid-again"}


def mix(data: dict[str, Path], **kw: Any) -> dp.Loader:
    settings: dict[str, Any] = {"batch_size": 10, "num_workers": 0, "transform": CROP,
                                "weights": {"big": 6, "mid": 3, "rare": 1}}
    settings.update(kw)
    return dp.Loader({n: data[n] for n in SIZES}, **settings)


def samples(batches: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(int(s), int(i)) for b in batches for s, i in
            zip(b["source"][~b["is_padding"]], b["index"][~b["is_padding"]], strict=True)]


def test_every_batch_holds_each_source_within_one_sample_of_its_weight(
        data: dict[str, Path]) -> None:
    with mix(data, num_workers=2, epoch_size=60) as loader:
        batches = list(loader)
    assert len(batches) == 6
    for batch in batches:
        counts = np.bincount(batch["source"].numpy(), minlength=3)
        assert np.abs(counts - 10 * np.array([0.6, 0.3, 0.1])).max() < 1, counts
    total = Counter(s for s, _ in samples(batches))
    assert [total[0], total[1], total[2]] == [36, 18, 6]


@pytest.mark.parametrize("decode", ["cpu", "dali"])
def test_source_and_index_name_the_sample_within_its_own_dataset(
        data: dict[str, Path], decode: str) -> None:
    if decode == "dali":
        pytest.importorskip("nvidia.dali")  # on a machine without CUDA: DALI's CPU pipeline
    labels = {}
    for s, name in enumerate(SIZES):
        with Dataset(data[name]) as ds:
            labels[s] = ds.scalar("label")
    with mix(data, num_workers=2, decode=decode) as loader:
        for batch in loader:
            assert batch["source"].dtype == batch["index"].dtype
            for s, i, label in zip(batch["source"].tolist(), batch["index"].tolist(),
                                   batch["label"].tolist(), strict=True):
                assert 0 <= i < SIZES[list(SIZES)[s]]
                assert label == labels[s][i]


def test_a_source_whose_share_is_its_size_gives_each_sample_once(
        data: dict[str, Path]) -> None:
    # Default weights are the sizes: the plain concatenation, every sample once per epoch.
    with mix(data, weights=None) as loader:
        drawn = samples(list(loader))
    assert sorted(drawn) == [(s, i) for s, n in enumerate(SIZES.values()) for i in range(n)]


def test_an_up_sampled_source_repeats_only_after_all_its_samples(
        data: dict[str, Path]) -> None:
    with mix(data, weights=[1, 1, 1], epoch_size=60) as loader:  # rare: 20 of 4 samples
        batches = list(loader)
    seen = np.zeros(4, dtype=int)
    for batch in batches:  # (a batch reads its samples grouped by source and shard)
        seen += np.bincount([i for s, i in samples([batch]) if s == 2], minlength=4)
        assert seen.max() - seen.min() <= 1, f"a repeat before all were seen: {seen}"
    assert seen.tolist() == [5, 5, 5, 5]
    with mix(data, weights=[1, 1, 1], epoch_size=60) as loader:  # down-sampled: big, 20 of 30
        seen = set()
        for epoch in range(3):
            loader.set_epoch(epoch)
            seen |= {i for s, i in samples(list(loader)) if s == 0}
    assert seen == set(range(30)), "over epochs a down-sampled source is all seen"


def test_two_runs_with_one_seed_give_identical_batches_and_another_seed_differs(
        data: dict[str, Path]) -> None:
    def run(seed: int) -> list[tuple[int, int]]:
        with mix(data, seed=seed, num_workers=2) as loader:
            return samples(list(loader))

    assert run(0) == run(0)
    assert run(0) != run(1)


def test_resume_at_every_step_is_exact(data: dict[str, Path]) -> None:
    check_resume_at_every_step(lambda: mix(data, epoch_size=50), epoch=1)


def test_resume_at_every_step_across_a_phase_boundary(data: dict[str, Path]) -> None:
    weights = [(0, [6, 3, 1]), (7, [1, 1, 8])]  # step 7: in the second epoch of 5 steps
    check_resume_at_every_step(lambda: mix(data, weights=weights, epoch_size=50), epoch=1)
    with mix(data, weights=weights, epoch_size=50) as loader:
        loader.set_epoch(1)
        batches = list(loader)
    assert np.bincount(batches[1]["source"].numpy(), minlength=3).tolist() == [6, 3, 1]
    assert np.bincount(batches[2]["source"].numpy(), minlength=3).tolist() == [1, 1, 8]


def test_elastic_resume_from_2_to_3_ranks_keeps_each_sources_counts(
        data: dict[str, Path]) -> None:
    def make(**rank: int) -> dp.Loader:
        return mix(data, batch_size=4, epoch_size=48, **rank)

    whole, _ = run_world(make, 2, None)
    head, state = run_world(make, 2, None, steps=2)
    tail, _ = run_world(make, 3, state)
    drawn = Counter(x for rank in head + tail for x in samples(rank))
    expected = Counter(x for rank in whole for x in samples(rank))
    assert drawn == expected


def test_progress_counts_each_sources_samples_and_goes_in_the_state(
        data: dict[str, Path]) -> None:
    with mix(data, epoch_size=60) as loader:
        assert loader.progress() == {"big": {"samples": 0}, "mid": {"samples": 0},
                                     "rare": {"samples": 0}}
        it = iter(loader)
        head = [next(it) for _ in range(2)]
        counts = Counter(s for s, _ in samples(head))
        assert loader.progress() == {"big": {"samples": counts[0]},
                                     "mid": {"samples": counts[1]},
                                     "rare": {"samples": counts[2]}}
        assert loader.state_dict()["progress"] == loader.progress()
        list(it)
        loader.set_epoch(1)
        next(iter(loader))
        assert loader.progress()["big"]["samples"] == 36 + 6


def test_a_state_over_other_weights_is_refused_unless_reweight(
        data: dict[str, Path]) -> None:
    with mix(data, epoch_size=60) as loader:
        it = iter(loader)
        next(it), next(it)
        state = json.loads(json.dumps(loader.state_dict()))
    with mix(data, epoch_size=60, weights=[1, 1, 1]) as other, \
            pytest.raises(ArgumentError, match=r"weights .*reweight=True"):
        other.load_state_dict(state)
    with mix(data, epoch_size=60, weights=[1, 1, 8], reweight=True) as other:
        other.load_state_dict(state)
        rest = list(other)
        assert other.mixture.schedule.to_json() == [[0, [6, 3, 1]], [2, [1, 1, 8]]]
    assert len(rest) == 4
    for batch in rest:
        assert np.bincount(batch["source"].numpy(), minlength=3).tolist() == [1, 1, 8]


def test_a_state_over_other_datasets_names_the_source(data: dict[str, Path]) -> None:
    with mix(data) as loader:
        state = loader.state_dict()
    paths = {"big": data["big"], "mid": data["mid-again"], "rare": data["rare"]}
    with dp.Loader(paths, batch_size=10, num_workers=0, transform=CROP,
                   weights=[6, 3, 1]) as other, \
            pytest.raises(ArgumentError, match="source 'mid'"):
        other.load_state_dict(state)
    with dp.Loader(data["big"], batch_size=10, num_workers=0, transform=CROP) as one, \
            pytest.raises(ArgumentError, match="saved over a mixture of 'big', 'mid', 'rare'"):
        one.load_state_dict(state)


@pytest.mark.parametrize("weights, message", [
    ([1, -1, 1], r"weights\[1\] must be a finite number >= 0"),
    ([1, float("nan"), 1], r"weights\[1\] must be a finite number"),
    ([1, float("inf"), 1], r"weights\[1\] must be a finite number"),
    ([0, 0, 0], "all weights are zero"),
    ([1, 2], "has 2 weights for 3 sources"),
    ({"big": 1, "mid": 1, "huge": 1}, "unknown source 'huge'"),
    ({"big": 1, "mid": 1}, "no weight for source 'rare'"),
    ([(0, [1, 1, 1]), (0, [1, 2, 1])], "phase start steps must increase"),
    ([(5, [1, 1, 1])], "first phase must start at step 0"),
])
def test_bad_weights_are_one_line_errors(data: dict[str, Path], weights: Any,
                                         message: str) -> None:
    with pytest.raises(ArgumentError, match=message) as info:
        mix(data, weights=weights)
    assert "\n" not in str(info.value)


def test_datasets_that_cannot_share_a_batch_are_refused_naming_both(
        data: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match=r"tokens is a text dataset .*of one kind"):
        dp.Loader([data["big"], data["tokens"]], batch_size=4, num_workers=0, transform=CROP)
    with pytest.raises(ArgumentError, match=r"big and .*other cannot be mixed: classes"):
        dp.Loader([data["big"], data["other"]], batch_size=4, num_workers=0, transform=CROP)
    with pytest.raises(ArgumentError, match="is given twice"):
        dp.Loader([data["big"], data["big"]], batch_size=4, num_workers=0, transform=CROP)
    with pytest.raises(ArgumentError, match="weights= mixes several datasets"):
        dp.Loader(data["big"], batch_size=4, num_workers=0, weights=[1])
    with pytest.raises(ArgumentError, match="an empty list of datasets"):
        dp.Loader([], batch_size=4)


def test_an_empty_source_is_refused_naming_it(data: dict[str, Path], tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    with dp.DatasetWriter(empty, {"image": "jpeg", "label": "int64"}):
        pass
    with pytest.raises((DataError, ArgumentError), match=f"{empty}"):
        dp.Loader([data["big"], empty], batch_size=4, num_workers=0, transform=CROP)


def test_local_and_s3_datasets_mix(data: dict[str, Path], s3_bucket: str) -> None:
    url = f"{s3_bucket}/mid"
    upload_directory(data["mid"], url)
    with dp.Loader({"big": data["big"], "mid": url, "rare": data["rare"]}, batch_size=10,
                   num_workers=2, transform=CROP, weights=[6, 3, 1]) as remote, \
            mix(data, num_workers=2) as local:
        assert samples(list(remote)) == samples(list(local))


PETS, WILD = ("cat", "dog"), ("ant", "dog", "emu")


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two converted ImageFolders whose classes differ: pets (cat, dog: 5 each) and wild (ant,
    dog, emu: 3 each), so "dog" is label 1 in both and the union renumbers both."""
    root = tmp_path_factory.mktemp("zoo")
    out = {}
    for name, classes, per_class in (("pets", PETS, 5), ("wild", WILD, 3)):
        src = make_image_folder(root / f"src-{name}", classes=len(classes), per_class=per_class,
                                size=(24, 24), seed=len(name))
        for c, folder in enumerate(classes):
            (src / f"class_{c}").rename(src / folder)
        convert("images", src, root / name, "--short-side", "16", "--shard-size", "4KB")
        out[name] = root / name
    return out


def _class_names(batches: list[dict[str, Any]], classes: tuple[str, ...],
                 zoo: dict[str, Path]) -> list[tuple[str, str]]:
    """(the class a batch's label names in `classes`, the class its dataset stores) per sample."""
    stored = {}
    for s, (name, own) in enumerate((("pets", PETS), ("wild", WILD))):
        with Dataset(zoo[name]) as ds:
            stored[s] = [own[label] for label in ds.scalar("label").tolist()]
    return [(classes[label], stored[s][i]) for b in batches for s, i, label in
            zip(b["source"].tolist(), b["index"].tolist(), b["label"].tolist(), strict=True)]


@pytest.mark.parametrize(("decode", "num_workers"), [("cpu", 0), ("cpu", 2), ("dali", 0)])
def test_datasets_with_other_classes_mix_under_their_union(zoo: dict[str, Path], decode: str,
                                                           num_workers: int) -> None:
    if decode == "dali":
        pytest.importorskip("nvidia.dali")  # on a machine without CUDA: DALI's CPU pipeline
    with dp.Loader(zoo, batch_size=4, num_workers=num_workers, transform=CROP, decode=decode,
                   classes="union") as loader:
        assert loader.classes == ("ant", "cat", "dog", "emu")
        batches = list(loader)
    named = _class_names(batches, loader.classes, zoo)
    assert len(named) == 19 and all(label == own for label, own in named)
    dogs = {int(label) for b in batches for s, label in zip(b["source"].tolist(),
                                                            b["label"].tolist(), strict=True)
            if loader.classes[label] == "dog"}
    assert dogs == {2}, "a dog is label 2 from either dataset"


def test_a_class_list_of_ones_own_renumbers_every_dataset_to_it(zoo: dict[str, Path],
                                                                 data: dict[str, Path]) -> None:
    head = ("dog", "emu", "bird", "cat", "ant")  # a model's classes, in its order
    with dp.Loader([zoo["pets"], zoo["wild"]], batch_size=5, num_workers=2, transform=CROP,
                   classes=head) as loader:
        assert loader.classes == head
        named = _class_names(list(loader), head, zoo)
    assert len(named) == 19 and all(label == own for label, own in named)
    with dp.Loader(zoo["wild"], batch_size=9, num_workers=0, transform=CROP) as plain, \
            mix(data) as alike:
        assert plain.classes == WILD and alike.classes == ("class_0", "class_1")
    with dp.Loader(zoo["wild"], batch_size=9, num_workers=0, transform=CROP,
                   classes=head) as one, Dataset(zoo["wild"]) as ds:
        batch = next(iter(one))
        stored = ds.scalar("label")[batch["index"].numpy()]
        assert [head[x] for x in batch["label"].tolist()] == [WILD[x] for x in stored]


def test_resume_of_a_relabelled_mixture_is_exact(zoo: dict[str, Path]) -> None:
    def make() -> dp.Loader:
        return dp.Loader(zoo, batch_size=4, num_workers=0, transform=CROP, classes="union",
                         weights=[1, 1], epoch_size=16)

    check_resume_at_every_step(make, epoch=1)
    with make() as first:
        it = iter(first)
        next(it)
        state = json.loads(json.dumps(first.state_dict()))
    with make() as second:
        second.load_state_dict(state)
        rest = list(second)
    named = _class_names(rest, second.classes, zoo)
    assert len(named) == 12 and all(label == own for label, own in named)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_label_outside_its_datasets_classes_is_refused_when_a_batch_reads_it(
        zoo: dict[str, Path], tmp_path: Path, num_workers: int) -> None:
    """Labels are renumbered per batch, from the datasets' mapped label columns. A label no
    class of its dataset has (here a map damaged with its stamp kept, which is trusted, not
    hashed) is a DataError naming that dataset, not another class's number."""
    wild = Path(shutil.copytree(zoo["wild"], tmp_path / "wild"))
    with Dataset(wild) as ds:
        column = ds.scalar_map("label")
        path = Path(mapped_file(column))
        at = path.stat().st_size - column.itemsize  # the last value: an .npy ends with its data
    stat = path.stat()
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(np.int64(7).tobytes())
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with dp.Loader({"pets": zoo["pets"], "wild": wild}, batch_size=4, num_workers=num_workers,
                   transform=CROP, classes="union") as loader, \
            pytest.raises(DataError) as info:
        list(loader)
    assert str(info.value) == (f"{wild}: label 7 is not one of its manifest's 3 classes (a "
                               f"corrupt shard? run `datapipe verify {wild}`)")


def test_other_classes_are_refused_naming_the_option_and_lists_that_cannot_be_used(
        zoo: dict[str, Path], data: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match=r"pets and .*wild cannot be mixed: classes .*'2: "
                                            r"cat, dog' vs '3: ant, dog, emu'; pass "
                                            r"classes='union' .* or classes=\[...\]") as info:
        dp.Loader([zoo["pets"], zoo["wild"]], batch_size=4, num_workers=0, transform=CROP)
    assert "\n" not in str(info.value)
    with pytest.raises(ArgumentError, match=r"classes: .*wild has class 'ant', which the list "
                                            r"given lacks \(2 of its classes"):
        dp.Loader(zoo, batch_size=4, num_workers=0, transform=CROP, classes=["cat", "dog"])
    for wrong in ("all", [], ["cat", 3], 7):
        with pytest.raises(ArgumentError, match="classes: give 'union' or a list"):
            dp.Loader(zoo, batch_size=4, num_workers=0, transform=CROP, classes=wrong)
    with pytest.raises(ArgumentError, match="classes: 'dog' is given twice"):
        dp.Loader(zoo, batch_size=4, num_workers=0, transform=CROP, classes=["dog", "dog"])
    unlabelled = tmp_path / "unlabelled"
    with dp.DatasetWriter(unlabelled, {"image": "jpeg"}) as writer:
        writer.write({"image": (zoo["pets"].parent / "src-pets" / "cat" / "img_000.jpg")
                      .read_bytes()})
    with pytest.raises(ArgumentError, match=r"classes: .*unlabelled has no class names"):
        dp.Loader([zoo["pets"], unlabelled], batch_size=4, num_workers=0, transform=CROP,
                  classes="union")


def test_classes_that_differ_past_the_names_shown_are_refused(tmp_path: Path) -> None:
    """Four classes each, the first three alike: the lists differ, and the message says where."""
    make_image_folder(tmp_path / "src", classes=1, per_class=1, size=(24, 24))
    image = next((tmp_path / "src").rglob("*.jpg")).read_bytes()
    paths = []
    for last in ("dog", "emu"):
        path = tmp_path / last
        with dp.DatasetWriter(path, {"image": "jpeg", "label": "int64"},
                              classes=["ant", "bee", "cat", last]) as writer:
            writer.write({"image": image, "label": 3})
        paths.append(path)
    with pytest.raises(ArgumentError, match=r"'4: ant, bee, cat, ...' vs '4: ant, bee, cat, "
                                            r"...' \(label 3: 'dog' vs 'emu'\)"):
        dp.Loader(paths, batch_size=2, num_workers=0, transform=CROP)
    with dp.Loader(paths, batch_size=2, num_workers=0, transform=CROP, shuffle=False,
                   classes="union") as loader:
        assert loader.classes == ("ant", "bee", "cat", "dog", "emu")
        assert next(iter(loader))["label"].tolist() == [3, 4]
