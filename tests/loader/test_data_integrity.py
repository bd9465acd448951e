"""Corrupt shards through the loaders: real converted shards, bytes flipped at chosen places,
real worker processes. Each failure is a DataError naming the shard, row and sample."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import datapipe as dp
from datapipe.errors import ArgumentError, DataError
from datapipe.format import Dataset, integrity
from datapipe.text.index import length_index
from tests.conftest import convert
from tests.format import flips
from tests.imagegen import make_image_folder
from tests.loader.helpers import indices_of, same_batch

CROP = dp.image.RandomResizedCrop(24) | dp.image.HorizontalFlip()
FORMATS = ["arrow", "msgpack"]


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("images")
    src = make_image_folder(root / "src", classes=2, per_class=5, size=(40, 32))
    for fmt in FORMATS:
        convert("images", src, root / fmt, "--short-side", "32", "--shard-size", "6KB",
                "--format", fmt)
    return {fmt: root / fmt for fmt in FORMATS}


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("texts")
    lines = [f"document {i} " + "word " * (i % 11) for i in range(80)]
    (root / "a.txt").write_text("\n".join(lines) + "\n")
    for fmt in FORMATS:
        convert("text", root / "a.txt", root / fmt, "--tokenizer", "bytes", "--append-eos",
                "--shard-size", "1KB", "--format", fmt)
    return {fmt: root / fmt for fmt in FORMATS}


@pytest.fixture(autouse=True)
def _nothing_verified_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts as a fresh process would: no shard hashed yet."""
    monkeypatch.setattr(integrity, "_verified", set())


def _copy(src: Path, dst: Path) -> Path:
    """The dataset without the length index or scalar maps an earlier test left: the copy's
    damaged shards are what its columns are read from."""
    return Path(shutil.copytree(src, dst, ignore=shutil.ignore_patterns(
        ".datapipe-length-index-*", ".datapipe-scalars-*")))


def _second_shard(directory: Path) -> tuple[Path, int]:
    with Dataset(directory) as ds:
        return directory / ds.manifest.shards[1].name, int(ds.shard_starts[1])


def _scalar_position(shard: Path, column: str, row: int, itemsize: int) -> int:
    if shard.suffix == ".arrow":
        return flips.arrow_scalar_position(shard, column, row)
    return flips.msgpack_scalar_position(shard, column, row, itemsize)


def _image_loader(path: Path, workers: int, **kwargs: object) -> dp.Loader:
    return dp.Loader(path, batch_size=3, num_workers=workers, shuffle=False, transform=CROP,
                     **kwargs)


def _names(err: pytest.ExceptionInfo, shard: Path, row: int, sample: int) -> str:
    message = str(err.value)
    assert shard.name in message and f"row {row} (sample {sample})" in message, message
    assert "datapipe verify" in message and "\n" not in message, message
    return message


@pytest.mark.parametrize("workers", [0, 2])
def test_label_outside_the_classes(images: dict[str, Path], tmp_path: Path,
                                   workers: int) -> None:
    out = _copy(images["arrow"], tmp_path / "ds")
    shard, first = _second_shard(out)
    flips.xor_byte(shard, _scalar_position(shard, "label", 1, 8) + 2, 0xFF)
    with _image_loader(out, workers) as loader, pytest.raises(DataError) as err:
        list(loader)
    assert "is not one of the manifest's 2 classes" in _names(err, shard, 1, first + 1)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("workers", [0, 2])
def test_height_larger_than_the_stored_jpeg(images: dict[str, Path], tmp_path: Path, fmt: str,
                                            workers: int) -> None:
    """Height 32 becomes 288: a possible size, but not the JPEG's. Without the check the crop
    is planned over rows that do not exist and the batch gets a stretched sliver."""
    out = _copy(images[fmt], tmp_path / "ds")
    shard, first = _second_shard(out)
    flips.xor_byte(shard, _scalar_position(shard, "height", 0, 4) + 1, 0x01)
    with _image_loader(out, workers) as loader, pytest.raises(DataError) as err:
        list(loader)
    message = _names(err, shard, 0, first)
    assert "the image is" in message and "height say" in message
    with _image_loader(out, workers, on_error="skip") as loader, \
            pytest.warns(UserWarning, match="skipped 1"):
        seen = indices_of(list(loader))
    assert seen == [i for i in range(10) if i != first]


def _token_row(shard: Path, fmt: str) -> tuple[int, int]:
    """(row, file offset of that row's second token id's high byte) in a text shard."""
    row = 1
    if fmt == "arrow":
        at, size = flips.arrow_buffer(shard, "tokens", 1)
        offsets = np.frombuffer(shard.read_bytes()[at:at + size], dtype="<i8")
        values_at, _ = flips.arrow_buffer(shard, "tokens", 3)
        return row, values_at + 2 * (int(offsets[row]) + 1) + 1
    start, end = flips.msgpack_record(shard, row)
    with Dataset(shard.parent) as ds:
        ids = ds.shard(1).payload("tokens", row)
    found = shard.read_bytes().index(ids.astype("<u2").tobytes(), start, end)
    return row, found + 2 + 1


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("workers", [0, 2])
def test_token_id_beyond_the_vocabulary(texts: dict[str, Path], tmp_path: Path, fmt: str,
                                        workers: int) -> None:
    out = _copy(texts[fmt], tmp_path / "ds")
    shard, first = _second_shard(out)
    row, position = _token_row(shard, fmt)
    flips.xor_byte(shard, position, 0x80)  # id + 32768, far past the 257 byte tokens
    with dp.TokenLoader(out, max_tokens=256, num_workers=workers, shuffle=False) as loader, \
            pytest.raises(DataError) as err:
        list(loader)
    message = _names(err, shard, row, first + row)
    assert "token 1 is id " in message and "not below the vocabulary size 257" in message


@pytest.mark.parametrize("workers", [0, 2])
def test_broken_token_offsets(texts: dict[str, Path], tmp_path: Path, workers: int) -> None:
    """With the length index cached, only the workers open the shards."""
    out = _copy(texts["arrow"], tmp_path / "ds")
    dp.TokenLoader(out, max_tokens=256).close()  # caches the length index
    shard, first = _second_shard(out)
    at, _ = flips.arrow_buffer(shard, "tokens", 1)
    flips.xor_byte(shard, at + 8 * 2, 0x02)  # offset 2 moves by 2: rows 1 and 2 shift
    with dp.TokenLoader(out, max_tokens=256, num_workers=workers, shuffle=False) as loader, \
            pytest.raises(DataError) as err:
        list(loader)
    assert "its length column says" in _names(err, shard, 1, first + 1)


@pytest.mark.parametrize("workers", [0, 2])
def test_msgpack_length_that_is_not_the_record(texts: dict[str, Path], tmp_path: Path,
                                               workers: int) -> None:
    """msgpack keeps no offsets to compare lengths with at open: each record is checked as
    it is read."""
    out = _copy(texts["msgpack"], tmp_path / "ds")
    shard, first = _second_shard(out)
    flips.xor_byte(shard, _scalar_position(shard, "length", 1, 4), 0x01)
    with dp.TokenLoader(out, max_tokens=256, num_workers=workers, shuffle=False) as loader, \
            pytest.raises(DataError) as err:
        list(loader)
    assert "its length column says" in _names(err, shard, 1, first + 1)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("workers", [0, 2])
def test_verify_open_catches_a_flip_that_decodes(images: dict[str, Path], tmp_path: Path,
                                                 fmt: str, workers: int) -> None:
    out = _copy(images[fmt], tmp_path / "ds")
    shard, _ = _second_shard(out)
    flips.xor_byte(shard, flips.entropy_flip_that_still_decodes(shard, 0), 0x01)
    with _image_loader(out, workers) as loader:
        assert len(indices_of(list(loader))) == 10  # the cheap checks cannot see it
    with pytest.raises(DataError, match=f"{shard}: content hash differs from the manifest"):
        _image_loader(out, workers, verify="open")


def test_verify_open_catches_a_flipped_token(texts: dict[str, Path], tmp_path: Path) -> None:
    out = _copy(texts["arrow"], tmp_path / "ds")
    shard, _ = _second_shard(out)
    _, position = _token_row(shard, "arrow")
    flips.xor_byte(shard, position - 1, 0x01)  # low byte: still a byte token
    with dp.TokenLoader(out, max_tokens=256, num_workers=0) as loader:
        list(loader)
    with pytest.raises(DataError, match=f"{shard}: content hash differs"):
        dp.TokenLoader(out, max_tokens=256, verify="open")


def test_verify_open_hashes_each_shard_once_across_workers(images: dict[str, Path],
                                                           tmp_path: Path, monkeypatch) -> None:
    """The loader hashes before its workers fork; they inherit the result (persistent or
    not) instead of each hashing every shard again."""
    log = tmp_path / "hashed.txt"
    real_hash = integrity.hash_file

    def logging_hash(path: Path) -> str:
        with open(log, "a") as f:  # appends from any process
            f.write(f"{Path(path).name}\n")
        return real_hash(path)

    monkeypatch.setattr(integrity, "hash_file", logging_hash)
    with _image_loader(images["arrow"], 2, verify="open", persistent=False) as loader:
        for _ in range(2):
            list(loader)
    with Dataset(images["arrow"]) as ds:
        assert sorted(log.read_text().split()) == [s.name for s in ds.manifest.shards]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("workers", [0, 2])
def test_clean_datasets_pass_in_every_mode(images: dict[str, Path], texts: dict[str, Path],
                                           tmp_path: Path, fmt: str, workers: int) -> None:
    text = _copy(texts[fmt], tmp_path / "text")
    runs: dict[str, tuple[list, list]] = {}
    for verify in integrity.VERIFY_MODES:
        with _image_loader(images[fmt], workers, verify=verify) as loader:
            image_batches = list(loader)
        with dp.TokenLoader(text, max_tokens=256, num_workers=workers, verify=verify) as loader:
            token_batches = list(loader)
        runs[verify] = image_batches, token_batches
    cheap, opened = runs["cheap"], runs["open"]
    assert sorted(indices_of(cheap[0])) == list(range(10))
    assert sorted(i for b in cheap[1] for i in b["index"].tolist()) == list(range(80))
    for got, want in zip(opened[0] + opened[1], cheap[0] + cheap[1], strict=True):
        assert same_batch(got, want)
    assert all(b["label"].dtype == torch.int64 for b in cheap[0])


def test_verify_argument_is_checked(images: dict[str, Path], texts: dict[str, Path]) -> None:
    for bad in ("full", None, True):
        with pytest.raises(ArgumentError, match="verify must be one of"):
            _image_loader(images["arrow"], 0, verify=bad)
        with pytest.raises(ArgumentError, match="verify must be one of"):
            dp.TokenLoader(texts["arrow"], max_tokens=256, verify=bad)


def test_bench_verify_option(cli, images: dict[str, Path], tmp_path: Path) -> None:
    out = _copy(images["arrow"], tmp_path / "ds")
    args = ("--batch-size", "2", "--workers", "1", "--crop", "24", "--epochs", "1")
    clean = cli("bench", out, *args, "--verify", "open")
    assert clean.code == 0 and "samples/s" in clean.out and "verify=open" in clean.out
    shard, _ = _second_shard(out)
    flips.xor_byte(shard, flips.entropy_flip_that_still_decodes(shard, 0), 0x01)
    assert cli("bench", out, *args).code == 0
    corrupt = cli("bench", out, *args, "--verify", "open")
    assert corrupt.code == 1 and len(corrupt.err.strip().splitlines()) == 1
    assert f"{shard.name}: content hash differs" in corrupt.err
    wrong = cli("bench", out, *args, "--verify", "full")
    assert wrong.code == 2 and "'--verify'" in wrong.err


def test_a_damaged_length_index_is_rebuilt(texts: dict[str, Path], tmp_path: Path) -> None:
    """The cached length index plans every token range: a flipped bit in it would make ranges
    cross documents. Its name carries its content's hash, so a damaged one is rebuilt."""
    out = _copy(texts["arrow"], tmp_path / "ds")
    with dp.TokenLoader(out, max_tokens=256, shuffle=False) as loader:
        want = list(loader)
    (cache,) = out.glob(".datapipe-length-index-*.npy")
    lengths = np.load(cache)
    flips.xor_byte(cache, cache.stat().st_size - lengths.nbytes + 8 * 3, 0x01)
    with dp.TokenLoader(out, max_tokens=256, shuffle=False, num_workers=2) as loader:
        got = list(loader)
    assert len(got) == len(want) and all(map(same_batch, got, want))
    (rebuilt,) = out.glob(".datapipe-length-index-*.npy")
    np.testing.assert_array_equal(np.load(rebuilt), lengths)


def test_an_unchanged_length_index_is_not_hashed_at_every_start(texts: dict[str, Path],
                                                                 tmp_path: Path) -> None:
    """A billion documents' index is 8 GB: hashed at every start it would cost what it saves.
    Its summary stamps the file it matched (size, mtime); a file with that stamp is trusted,
    verify='open' hashes it anyway. (Shown by a change that keeps the stamp.)"""
    out = _copy(texts["arrow"], tmp_path / "ds")
    with Dataset(out) as ds:
        lengths, _ = length_index(ds)
        lengths = np.array(lengths)
    (cache,) = out.glob(".datapipe-length-index-*.npy")
    stamp = cache.stat()
    flips.xor_byte(cache, cache.stat().st_size - lengths.nbytes + 8 * 3, 0x01)
    os.utime(cache, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    with Dataset(out) as ds:
        assert length_index(ds)[0][3] == lengths[3] ^ 1, "trusted: not hashed"
    with Dataset(out, verify="open") as ds:
        np.testing.assert_array_equal(length_index(ds)[0], lengths)
