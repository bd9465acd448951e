"""The loaders read what DatasetWriter writes, in real worker processes: dp.Loader an image
dataset (JPEG, PNG or raw pixels) with its extra columns in each batch, dp.TokenLoader a token
dataset with its metadata columns beside each document."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import datapipe as dp
from datapipe.errors import DataError

EXTRAS = {"weight": "float32", "caption": "string", "box": "float32[4]", "points": "int16[]",
          "raw": "bytes"}


def pixels(i: int) -> np.ndarray:
    """A 12x16 image of its own, smooth enough for JPEG to keep it close: gradients, and a
    blue that tells the samples apart."""
    y, x = np.mgrid[0:12, 0:16]
    return np.stack([x * 12 + i, y * 16, np.full_like(x, i * 6)], axis=-1).astype(np.uint8)


def encoded(array: np.ndarray, fmt: str) -> bytes:
    out = io.BytesIO()
    Image.fromarray(array).save(out, fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    return out.getvalue()


def extras(i: int) -> dict:
    return {"weight": i / 4, "caption": f"sample {i}", "box": np.array([i, 0, 1, 2], np.float32),
            "points": np.arange(i % 5, dtype=np.int16), "raw": bytes([i]) * 3}


@pytest.fixture(scope="module", params=["jpeg", "png", "pixels"])
def image_dataset(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                  ) -> tuple[str, Path]:
    kind = request.param
    out = tmp_path_factory.mktemp("written") / kind
    value = {"jpeg": lambda a: encoded(a, "JPEG"), "png": lambda a: encoded(a, "PNG"),
             "pixels": lambda a: a}[kind]
    with dp.DatasetWriter(out, {"image": kind, "label": "int64", **EXTRAS},
                          shard_size="2KB", classes=["a", "b", "c"]) as writer:
        writer.write_all({"image": value(pixels(i)), "label": i % 3, **extras(i)}
                         for i in range(40))
    assert len(writer.manifest.shards) > 3
    return kind, out


def test_loader_reads_an_image_dataset_with_its_extra_columns(image_dataset) -> None:
    kind, out = image_dataset
    seen = []
    with dp.Loader(out, batch_size=8, num_workers=2, seed=3) as loader:
        for batch in loader:
            assert batch["image"].shape[1:] == (3, 12, 16)
            for j, i in enumerate(batch["index"].tolist()):
                seen.append(i)
                image = batch["image"][j].permute(1, 2, 0).numpy()
                error = np.abs(image.astype(int) - pixels(i).astype(int)).mean()
                assert error < (4 if kind == "jpeg" else 1e-9), (kind, i, error)
                assert batch["label"][j] == i % 3
                want = extras(i)
                assert batch["weight"][j] == pytest.approx(want["weight"])
                assert batch["caption"][j] == want["caption"]
                assert torch.equal(batch["box"][j], torch.from_numpy(want["box"]))
                np.testing.assert_array_equal(batch["points"][j], want["points"])
                assert batch["raw"][j] == want["raw"]
            assert batch["box"].dtype == torch.float32 and batch["weight"].dtype == torch.float32
    assert sorted(seen) == list(range(40))


def test_loader_hands_out_only_the_extra_columns_asked_for(image_dataset) -> None:
    _, out = image_dataset
    with dp.Loader(out, batch_size=40, num_workers=0, extra_columns=("box",)) as loader:
        batch = next(iter(loader))
    assert set(batch) == {"image", "label", "index", "is_padding", "box"}
    assert batch["box"].shape == (40, 4)


def test_an_unlabelled_image_dataset_reads_with_label_minus_one(tmp_path: Path) -> None:
    with dp.DatasetWriter(tmp_path / "out", {"image": "png"}) as writer:
        writer.write_all({"image": encoded(pixels(i), "PNG")} for i in range(5))
    with dp.Loader(tmp_path / "out", batch_size=5, num_workers=1) as loader:
        batch = next(iter(loader))
    assert batch["label"].tolist() == [-1] * 5


def documents(count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 50_000, int(n), dtype=np.uint32).astype(np.uint16)
            for n in rng.integers(1, 90, count)]


@pytest.fixture(scope="module")
def token_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tokens") / "out"
    with dp.DatasetWriter(out, {"tokens": "uint16[]", "source": "string", "doc": "int64",
                                "quality": "float32[2]"}, shard_size="2KB") as writer:
        for i, ids in enumerate(documents(120)):
            writer.write({"tokens": ids, "source": f"file{i % 4}", "doc": 10 * i,
                          "quality": [i, 0.5]})
    assert writer.manifest.kind == "text" and len(writer.manifest.shards) > 5
    return out


@pytest.mark.parametrize(("layout", "options"), [("packed", {"max_tokens": 300}),
                                                 ("padded", {"max_tokens": 300}),
                                                 ("fixed", {"max_tokens": 256, "seq_len": 64})])
def test_token_loader_reads_a_token_dataset_with_its_metadata(token_dataset: Path, layout: str,
                                                               options: dict) -> None:
    docs = documents(120)
    tokens: Counter = Counter()
    with dp.TokenLoader(token_dataset, layout=layout, num_workers=2, **options) as loader:
        for batch in loader:
            # One entry per sequence: a document (piece), or -1 (padding: a fixed row's tail),
            # whose values are 0 or None.
            index = batch["index"].tolist()
            assert batch["doc"].tolist() == [10 * i if i >= 0 else 0 for i in index]
            assert batch["source"] == [f"file{i % 4}" if i >= 0 else None for i in index]
            assert batch["quality"].shape == (len(index), 2)
            assert batch["quality"][:, 0].tolist() == [max(i, 0) for i in index]
            mask = batch.get("attention_mask")
            real = batch["input_ids"][mask.bool()] if mask is not None else \
                batch["input_ids"][: batch["num_real_tokens"]]
            tokens.update(real.tolist())
    assert tokens == Counter(np.concatenate(docs).tolist())


def test_token_loader_extra_columns_none_or_unknown(token_dataset: Path) -> None:
    with dp.TokenLoader(token_dataset, max_tokens=300, extra_columns=()) as loader:
        assert not {"doc", "source", "quality"} & set(next(iter(loader)))
    with pytest.raises(DataError, match="dataset has no column 'nope'"):
        dp.TokenLoader(token_dataset, max_tokens=300, extra_columns=("nope",))
    with dp.TokenLoader(token_dataset, max_tokens=300, fields=("input_ids", "doc")) as loader:
        ids, doc = next(iter(loader))
    assert isinstance(ids, torch.Tensor) and doc.dtype == torch.int64


def test_dataset_reads_any_dataset_by_index(token_dataset: Path) -> None:
    docs = documents(120)
    with dp.Dataset(token_dataset) as ds:
        assert len(ds) == 120
        sample = ds[7]
        assert set(sample) == {"tokens", "length", "source", "doc", "quality"}
        np.testing.assert_array_equal(sample["tokens"], docs[7])
        assert sample["length"] == len(docs[7]) and sample["source"] == "file3"
        assert [s["doc"] for s in ds] == [10 * i for i in range(120)]
        assert ds.cells("source", [1, 2]) == ["file1", "file2"]
        with pytest.raises(DataError, match="sample 120 out of range"):
            ds[120]
        with pytest.raises(DataError, match="sample -1 out of range"):
            ds.cells("doc", [0, -1])
