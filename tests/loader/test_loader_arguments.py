"""Every argument of Loader and TokenLoader is checked when the loader is made: a float, a bool
or a string where an integer belongs (or a string where a flag does) is a one-line
`ArgumentError` naming the argument, never a `TypeError` from deep inside; an empty dataset says
it is empty."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import datapipe as dp
from datapipe.errors import ArgumentError, DataError
from datapipe.format import Manifest
from tests.conftest import convert
from tests.imagegen import make_image_folder

CROP = dp.image.CenterCrop(16)


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("arguments")
    src = make_image_folder(root / "src", classes=2, per_class=4, size=(40, 32))
    convert("images", src, root / "out", "--short-side", "24")
    return root / "out"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("arguments-text")
    (root / "a.txt").write_text("\n".join(["some words here"] * 20) + "\n")
    convert("text", root / "a.txt", root / "out", "--tokenizer", "bytes")
    return root / "out"


def _emptied(dataset: Path, into: Path, stats: dict) -> Path:
    """The dataset's manifest with no shards: a dataset of 0 samples."""
    manifest = Manifest.load(dataset)
    into.mkdir()
    dataclasses.replace(manifest, shards=(), stats=stats).save(into)
    return into


IMAGE_INTEGERS = ["batch_size", "num_workers", "prefetch", "seed"]
TOKEN_INTEGERS = ["max_tokens", "batch_size", "seq_len", "seed", "num_workers",
                  "pad_to_multiple_of", "batch_multiple_of", "pad_id", "prefetch",
                  "bucket_batches", "pack_window"]
OPTIONAL = {"Loader": ("num_workers",), "TokenLoader": ("max_tokens", "batch_size")}


def _not_integers(loader: str, names: list[str]) -> list[tuple[str, object]]:
    """(argument, a value that is no integer) pairs; None only where it is not a default."""
    return [(name, value) for name in names for value in (16.0, True, "16", None)
            if not (value is None and name in OPTIONAL[loader])]


def _refused_as_no_integer(name: str, value: object) -> str:
    return rf"^{name} must be (an integer >= 1|a non-negative integer), got {value!r}$"


@pytest.mark.parametrize(("name", "value"), _not_integers("Loader", IMAGE_INTEGERS))
def test_loader_integers_must_be_integers(shards: Path, name: str, value: object) -> None:
    with pytest.raises(ArgumentError, match=_refused_as_no_integer(name, value)):
        dp.Loader(shards, transform=CROP, **{"num_workers": 0, name: value})


@pytest.mark.parametrize(("name", "value"), _not_integers("TokenLoader", TOKEN_INTEGERS))
def test_token_loader_integers_must_be_integers(corpus: Path, name: str, value: object) -> None:
    with pytest.raises(ArgumentError, match=_refused_as_no_integer(name, value)):
        dp.TokenLoader(corpus, **{"max_tokens": 4096, "num_workers": 0, name: value})


@pytest.mark.parametrize(("arguments", "message"), [
    ({"rank": 0.0, "world_size": 1}, "rank must be a non-negative integer, got 0.0"),
    ({"rank": 0, "world_size": 2.0}, "world_size must be an integer >= 1, got 2.0"),
    ({"rank": 0, "world_size": 0}, "world_size must be >= 1, got 0"),
    ({"rank": True, "world_size": 2}, "rank must be a non-negative integer, got True"),
    ({"shuffle": "False"}, "shuffle must be True or False, got 'False'"),
    ({"drop_last": 1}, "drop_last must be True or False, got 1"),
    ({"persistent": None}, "persistent must be True or False, got None"),
])
def test_ranks_and_flags_are_checked(shards: Path, corpus: Path, arguments: dict,
                                     message: str) -> None:
    with pytest.raises(ArgumentError, match=f"^{message}$"):
        dp.Loader(shards, num_workers=0, transform=CROP, **arguments)
    if "drop_last" not in arguments:
        with pytest.raises(ArgumentError, match=f"^{message}$"):
            dp.TokenLoader(corpus, max_tokens=64, **arguments)


def test_integers_of_any_integer_type_and_numpy_flags_are_taken(shards: Path,
                                                                corpus: Path) -> None:
    with dp.Loader(shards, batch_size=np.int32(3), num_workers=np.int64(0),
                   prefetch=np.uint8(1), shuffle=np.bool_(False), rank=np.int64(0),
                   world_size=np.int16(1), transform=CROP) as loader:
        assert [len(b["index"]) for b in loader] == [3, 3, 2]
        assert type(loader.batch_size) is int
    with dp.TokenLoader(corpus, max_tokens=np.int64(64), num_workers=0) as tokens:
        assert tokens.max_tokens == 64 and type(tokens.max_tokens) is int
        assert sum(1 for _ in tokens) >= 1


@pytest.mark.parametrize("workers", [0, 2])
def test_an_empty_image_dataset_is_refused(shards: Path, tmp_path: Path, workers: int) -> None:
    empty = _emptied(shards, tmp_path / "empty", {"inputs": 3, "rejected": 3})
    with pytest.raises(DataError) as refused:
        dp.Loader(empty, batch_size=4, num_workers=workers, transform=CROP)
    assert str(refused.value) == (f"{empty}: the dataset is empty, 0 samples: all 3 inputs were "
                                  "rejected when it was converted (see rejects.jsonl beside the "
                                  "manifest)")


def test_an_empty_text_dataset_is_refused(corpus: Path, tmp_path: Path) -> None:
    empty = _emptied(corpus, tmp_path / "empty", {})
    with pytest.raises(DataError, match=r"^.*empty: the dataset is empty, 0 samples$"):
        dp.TokenLoader(empty, max_tokens=64, num_workers=0)
    assert json.loads((empty / "manifest.json").read_text())["shards"] == []


@pytest.mark.parametrize("world_size, batch_size, warns", [(1, 9, True), (1, 8, False),
                                                            (2, 5, True), (2, 4, False)])
def test_drop_last_that_drops_every_batch_says_so(shards: Path, world_size: int,
                                                  batch_size: int, warns: bool) -> None:
    """8 samples: a rank whose share is under batch_size gets no batch at all with drop_last."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = dp.Loader(shards, batch_size=batch_size, drop_last=True, num_workers=0,
                           transform=CROP, rank=world_size - 1, world_size=world_size)
        batches = sum(1 for _ in loader)
    said = [w for w in caught if "drop_last=True drops every batch" in str(w.message)]
    assert (batches == 0) == warns == bool(said), (batches, said)
