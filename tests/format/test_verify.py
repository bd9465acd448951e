"""`datapipe verify` finds whatever a reader would refuse: a manifest edited after conversion
(rows, classes, column types, vocabulary size) leaves every hash intact, yet the loaders refuse
the dataset and tell the user to run verify, which must then say what is wrong and exit 1."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import datapipe as dp
from datapipe.format import Dataset
from tests.conftest import convert
from tests.format import flips
from tests.imagegen import make_image_folder
from tests.s3server import get_object, put_object, upload_directory

FORMATS = ["arrow", "msgpack"]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """(kind, format) -> a dataset of several shards."""
    root = tmp_path_factory.mktemp("verify")
    src = make_image_folder(root / "src", classes=3, per_class=3, size=(40, 32))
    (root / "a.txt").write_text("".join(f"document {i} " + "word " * i + "\n"
                                        for i in range(40)))
    out = {}
    for fmt in FORMATS:
        out["images", fmt] = root / f"images-{fmt}"
        convert("images", src, out["images", fmt], "--short-side", "32", "--shard-size", "4KB",
                "--format", fmt, "--workers", "1")
        out["text", fmt] = root / f"text-{fmt}"
        convert("text", root / "a.txt", out["text", fmt], "--tokenizer", "bytes",
                "--shard-size", "1KB", "--format", fmt)
    return out


def _edited(source: Path, target: Path, edit: Callable[[dict], None]) -> Path:
    flips.copy_dataset(source, target)
    manifest = json.loads((target / "manifest.json").read_text())
    edit(manifest)
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


def _fewer_rows(manifest: dict) -> None:
    manifest["shards"][1]["rows"] -= 1


def _drop_last_class(manifest: dict) -> None:
    manifest["classes"] = manifest["classes"][:-1]


def _labels_as_int32(manifest: dict) -> None:
    next(c for c in manifest["columns"] if c["name"] == "label")["type"] = "int32"


def _smaller_vocabulary(manifest: dict) -> None:
    manifest["tokenizer"]["vocab_size"] = 100  # the bytes tokenizer's ids go past 100


def _no_height_column(manifest: dict) -> None:
    manifest["columns"] = [c for c in manifest["columns"] if c["name"] != "height"]


# (kind, edit, the shard whose line names it, what the line says)
EDITS = [
    ("images", _fewer_rows, 1, "rows, manifest says"),
    ("text", _fewer_rows, 1, "rows, manifest says"),
    ("images", _drop_last_class, None, "is not one of the manifest's 2 classes"),
    ("images", _labels_as_int32, 0, "column 'label' is stored as int64, the manifest says int32"),
    ("text", _smaller_vocabulary, None, "not below the vocabulary size 100"),
    ("images", _no_height_column, "manifest.json", "needs a scalar column 'height'"),
]


def _reader_refuses(kind: str, directory: Path) -> str:
    """The message a loader stops with."""
    with pytest.raises(dp.DataError) as caught:
        if kind == "images":
            with dp.Loader(directory, batch_size=4, transform=dp.image.CenterCrop(16),
                           shuffle=False) as loader:
                list(loader)
        else:
            with dp.TokenLoader(directory, max_tokens=64, shuffle=False) as loader:
                list(loader)
    return str(caught.value)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("kind", "edit", "shard", "says"), EDITS,
                         ids=[f"{kind}-{edit.__name__}" for kind, edit, _, _ in EDITS])
def test_verify_refuses_what_a_reader_refuses(datasets: dict, tmp_path: Path, cli, fmt: str,
                                              kind: str, edit: Callable, shard: object,
                                              says: str) -> None:
    out = _edited(datasets[kind, fmt], tmp_path / "ds", edit)
    _reader_refuses(kind, out)
    result = cli("verify", out)
    assert result.code == 1, result
    assert says in result.err, result.err
    assert "run `datapipe verify" not in result.err  # said by verify itself: no advice to run it
    if shard is not None:
        name = shard if isinstance(shard, str) else \
            json.loads((out / "manifest.json").read_text())["shards"][shard]["name"]
        assert f"{out}/{name}: " in result.err, result.err
    assert result.err.strip().splitlines()[-1].startswith(f"{out}: ")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", ["images", "text"])
def test_verify_passes_what_readers_read(datasets: dict, cli, fmt: str, kind: str) -> None:
    result = cli("verify", datasets[kind, fmt])
    assert result.code == 0 and "shards intact" in result.out, result.err


def test_verify_names_the_row_the_loader_names(datasets: dict, tmp_path: Path, cli) -> None:
    """A label out of range: the same shard, row, sample and reason as the loader's message."""
    out = _edited(datasets["images", "arrow"], tmp_path / "ds", _drop_last_class)
    loader_says = _reader_refuses("images", out)
    assert " row " in loader_says and "(sample " in loader_says
    shard, detail = loader_says.removesuffix(f" (a corrupt shard? run `datapipe verify {out}`)") \
        .split(" row ", 1)
    assert f"{shard}: row {detail}\n" in cli("verify", out).err


@pytest.mark.parametrize("backend", ["arrow", "fsspec"])
def test_verify_of_a_url_refuses_an_edited_manifest(datasets: dict, tmp_path: Path, s3_bucket: str,
                                                    cli, monkeypatch: pytest.MonkeyPatch,
                                                    backend: str) -> None:
    monkeypatch.setenv("DATAPIPE_REMOTE_BACKEND", backend)
    out = _edited(datasets["images", "msgpack"], tmp_path / "ds", _fewer_rows)
    url = f"{s3_bucket}/ds"
    upload_directory(out, url)
    result = cli("verify", url)
    name = json.loads((out / "manifest.json").read_text())["shards"][1]["name"]
    assert result.code == 1 and f"{url}/{name}: holds " in result.err, result.err
    assert "1 of " in result.err


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_scalar_index_of_a_url_refuses_an_edited_column_type(
        datasets: dict, tmp_path: Path, s3_bucket: str, fmt: str) -> None:
    """Over a URL the loaders read labels from the scalar index (range requests, no shard
    opened): it checks the stored types as the shard readers do, instead of reading int64
    labels as int32 ones."""
    out = _edited(datasets["images", fmt], tmp_path / "ds", _labels_as_int32)
    url = f"{s3_bucket}/ds"
    upload_directory(out, url)
    with Dataset(url) as ds, pytest.raises(dp.DataError, match="column 'label' is stored as "
                                                                "int64, the manifest says int32"):
        ds.scalar("label")


def test_verify_of_a_url_names_an_object_whose_bytes_changed(datasets: dict, tmp_path: Path,
                                                             s3_bucket: str, cli) -> None:
    """Same size, other bytes: only the hash, taken as the object streams in, can tell; the
    bytes never become a cached copy."""
    url = f"{s3_bucket}/ds"
    upload_directory(datasets["text", "arrow"], url)
    name = json.loads((datasets["text", "arrow"] / "manifest.json").read_text())["shards"][0][
        "name"]
    data = bytearray(get_object(f"{url}/{name}"))
    data[len(data) // 2] ^= 0x01
    put_object(f"{url}/{name}", bytes(data))
    result = cli("verify", url)
    assert result.code == 1
    assert f"{url}/{name}: content hash differs from the manifest\n" in result.err, result.err
    assert not list((tmp_path / "cache").rglob(name))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", ["images", "text"])
def test_verify_names_a_manifest_whose_num_samples_is_not_its_shards_rows(
        datasets: dict, tmp_path: Path, cli, fmt: str, kind: str) -> None:
    """Readers count the shards' rows and never read num_samples: every hash and shard is
    intact, and only verify can say that the manifest's own count is wrong."""
    rows = sum(s["rows"] for s in json.loads(
        (datasets[kind, fmt] / "manifest.json").read_text())["shards"])
    out = _edited(datasets[kind, fmt], tmp_path / "ds",
                  lambda manifest: manifest.update(num_samples=manifest["num_samples"] + 5))
    shards = len(json.loads((out / "manifest.json").read_text())["shards"])
    result = cli("verify", out)
    assert result.code == 1, result
    assert result.err.splitlines() == [
        f"{out}/manifest.json: num_samples is {rows + 5}, but its {shards} shards hold {rows} "
        "samples (the sum of their rows)",
        f"{out}: the manifest is wrong; its {shards} shards are intact"]
    with Dataset(out) as ds:
        assert len(ds) == rows


def test_verify_of_a_url_names_a_wrong_num_samples(datasets: dict, tmp_path: Path,
                                                   s3_bucket: str, cli) -> None:
    out = _edited(datasets["images", "arrow"], tmp_path / "ds",
                  lambda manifest: manifest.update(num_samples="nine"))
    url = f"{s3_bucket}/ds"
    upload_directory(out, url)
    result = cli("verify", url)
    assert result.code == 1 and f"{url}/manifest.json: num_samples is 'nine', but its " \
        in result.err, result.err
