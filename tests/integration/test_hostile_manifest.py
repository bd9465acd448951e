"""A manifest is data, not code: one from a bucket the user does not own names objects under
its own prefix and files inside the cache, nothing else. Every name it gives is refused at once
when it is not one plain file name, over both remote backends (the loopback S3 server of
tests/s3server.py) and for local datasets, through both loaders and the CLI: one line naming the
manifest and the name, exit status 1, and no file written or read outside the dataset."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import datapipe as dp
from tests.conftest import convert, run_cli_process
from tests.imagegen import make_image_folder
from tests.s3server import put_object, upload_directory

VICTIM_TEXT = "a local file the manifest must not touch\n"
# Names a shard may not have; "ABS" stands for the absolute path of an existing local file.
BAD_NAMES = ["../x", "ABS", "a/b", "..", "", "shard\x00.arrow", "a\\b", ".", "../../../x"]
BACKENDS = ["arrow", "fsspec"]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A small image dataset and a small text dataset, two shards or more each."""
    root = tmp_path_factory.mktemp("hostile")
    src = make_image_folder(root / "src", classes=2, per_class=3, size=(40, 32))
    convert("images", src, root / "images", "--short-side", "32", "--shard-size", "4KB",
            "--workers", "1")
    (root / "a.txt").write_text("".join(f"document {i} " + "word " * i + "\n"
                                        for i in range(40)))
    convert("text", root / "a.txt", root / "text", "--tokenizer", "bytes", "--shard-size", "1KB")
    return {"images": root / "images", "text": root / "text"}


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim" / "precious.txt"
    path.parent.mkdir()
    path.write_text(VICTIM_TEXT)
    return path


def _hostile_name(name: str, victim: Path) -> str:
    return str(victim) if name == "ABS" else name


def _tampered(manifest: Path, **shard0: object) -> bytes:
    """The manifest with its first shard's entry changed."""
    obj = json.loads(manifest.read_text())
    obj["shards"][0].update(shard0)
    return json.dumps(obj).encode()


def _files_outside(root: Path, cache: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and cache not in p.parents}


def _expect_refused(run: object, where: str, shown: str) -> None:
    with pytest.raises(dp.DataError) as caught:
        run()
    message = str(caught.value)
    assert where in message and shown in message and "\n" not in message, message


def _every_reader_refuses(cli, locations: dict[str, str], shown: str) -> None:
    """Both loaders and `datapipe inspect` / `verify`: one line naming manifest and name."""
    images, text = locations["images"], locations["text"]
    manifest = f"{str(images).rstrip('/')}/manifest.json"
    _expect_refused(lambda: dp.Loader(images, batch_size=2,
                                      transform=dp.image.CenterCrop(16)), manifest, shown)
    _expect_refused(lambda: dp.TokenLoader(text, max_tokens=64),
                    f"{str(text).rstrip('/')}/manifest.json", shown)
    for command in ("inspect", "verify"):
        result = cli(command, images)
        assert result.code == 1, (command, result)
        assert result.err.count("\n") == 1 and manifest in result.err and shown in result.err


def _upload(datasets: dict[str, Path], bucket: str, **shard0: object) -> dict[str, str]:
    urls = {}
    for kind, local in datasets.items():
        urls[kind] = f"{bucket}/{kind}"
        upload_directory(local, urls[kind])
        put_object(f"{urls[kind]}/manifest.json", _tampered(local / "manifest.json", **shard0))
    return urls


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_remote_manifest_names_only_files_of_its_own(
        datasets: dict[str, Path], s3_bucket: str, tmp_path: Path, victim: Path, cli,
        monkeypatch: pytest.MonkeyPatch, backend: str, name: str) -> None:
    monkeypatch.setenv("DATAPIPE_REMOTE_BACKEND", backend)
    name = _hostile_name(name, victim)
    before = _files_outside(tmp_path, tmp_path / "cache")
    urls = _upload(datasets, s3_bucket, name=name)
    _every_reader_refuses(cli, urls, f"shard name {name!r}")
    assert _files_outside(tmp_path, tmp_path / "cache") == before
    assert victim.read_text() == VICTIM_TEXT


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_local_manifest_names_only_files_of_its_own(datasets: dict[str, Path],
                                                      tmp_path: Path, victim: Path, cli,
                                                      name: str) -> None:
    name = _hostile_name(name, victim)
    copies = {}
    for kind, local in datasets.items():
        copies[kind] = tmp_path / kind
        copies[kind].mkdir()
        for path in local.iterdir():
            if path.is_file():
                (copies[kind] / path.name).write_bytes(path.read_bytes())
        (copies[kind] / "manifest.json").write_bytes(_tampered(local / "manifest.json",
                                                              name=name))
    _every_reader_refuses(cli, {k: str(v) for k, v in copies.items()}, f"shard name {name!r}")
    assert victim.read_text() == VICTIM_TEXT


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("value", ["xxh3_128:../../../../x", "xxh3_128:" + "0" * 31 + "/",
                                   "../" * 6 + "x", 7])
def test_a_shard_hash_is_a_hash(datasets: dict[str, Path], s3_bucket: str, tmp_path: Path,
                                cli, monkeypatch: pytest.MonkeyPatch, backend: str,
                                value: object) -> None:
    """The cache names a shard's folder by its hash: one that is not a hash is refused."""
    monkeypatch.setenv("DATAPIPE_REMOTE_BACKEND", backend)
    before = _files_outside(tmp_path, tmp_path / "cache")
    urls = _upload(datasets, s3_bucket, hash=value)
    _every_reader_refuses(cli, urls, f"hash {value!r}")
    assert _files_outside(tmp_path, tmp_path / "cache") == before


@pytest.mark.parametrize("entry", [{"name": 7}, {"rows": -1}, {"bytes": -5}, {"rows": "3"},
                                   {"rows": 2.5}, {"rows": True}])
def test_other_shard_fields_are_checked_as_the_manifest_is_read(
        datasets: dict[str, Path], tmp_path: Path, cli, entry: dict[str, object]) -> None:
    out = tmp_path / "ds"
    out.mkdir()
    for path in datasets["images"].iterdir():
        (out / path.name).write_bytes(path.read_bytes())
    (out / "manifest.json").write_bytes(_tampered(datasets["images"] / "manifest.json",
                                                  **entry))
    result = cli("inspect", out)
    assert result.code == 1 and result.err.count("\n") == 1, result
    assert f"{out}/manifest.json" in result.err and repr(next(iter(entry.values()))) in \
        result.err


def test_the_cli_process_refuses_an_absolute_name_in_one_line(
        datasets: dict[str, Path], s3_bucket: str, tmp_path: Path, victim: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The case that overwrote a local file with the object's bytes (fsspec backend)."""
    monkeypatch.setenv("DATAPIPE_REMOTE_BACKEND", "fsspec")
    urls = _upload(datasets, s3_bucket, name=str(victim))
    for command in ("inspect", "verify"):
        result = run_cli_process(command, urls["images"], timeout=120)
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
        assert f"shard name {str(victim)!r}" in result.stderr
    assert victim.read_text() == VICTIM_TEXT


@pytest.mark.parametrize("backend", BACKENDS)
def test_intact_datasets_still_read(datasets: dict[str, Path], s3_bucket: str,
                                    monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    """The checks refuse nothing a conversion writes."""
    monkeypatch.setenv("DATAPIPE_REMOTE_BACKEND", backend)
    urls = _upload(datasets, s3_bucket)
    with dp.Loader(urls["images"], batch_size=2, transform=dp.image.CenterCrop(16)) as loader:
        assert sum(len(b["index"]) for b in loader) == 6
    with dp.TokenLoader(urls["text"], max_tokens=256, shuffle=False) as loader:
        assert np.sum([b["input_ids"].numel() > 0 for b in loader]) > 0
