"""Flipped bytes inside real shards (made by `datapipe convert`) are caught as shards are opened,
with a DataError naming the shard, row and sample; verify="open" also catches what only a hash
can see."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from datapipe.errors import ArgumentError, DataError
from datapipe.format import Dataset, integrity
from tests.conftest import convert
from tests.format import flips
from tests.imagegen import make_image_folder

FORMATS = ["arrow", "msgpack"]


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """8 images of 2 classes over several small shards, in both formats."""
    root = tmp_path_factory.mktemp("images")
    src = make_image_folder(root / "src", classes=2, per_class=4, size=(40, 32))
    for fmt in FORMATS:
        convert("images", src, root / fmt, "--short-side", "32", "--shard-size", "4KB",
                "--format", fmt)
    return {fmt: root / fmt for fmt in FORMATS}


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """60 documents of byte tokens (vocabulary 257, stored as uint16), in both formats."""
    root = tmp_path_factory.mktemp("texts")
    lines = [f"document {i} " + "word " * (i % 9) for i in range(60)]
    (root / "a.txt").write_text("\n".join(lines) + "\n")
    for fmt in FORMATS:
        convert("text", root / "a.txt", root / fmt, "--tokenizer", "bytes", "--append-eos",
                "--shard-size", "1KB", "--format", fmt)
    return {fmt: root / fmt for fmt in FORMATS}


def _second_shard(directory: Path) -> tuple[Path, int, int]:
    """The second shard (so that row and sample differ), its first sample and its rows."""
    with Dataset(directory) as ds:
        info = ds.manifest.shards[1]
        return directory / info.name, int(ds.shard_starts[1]), info.rows


def _scalar_position(shard: Path, column: str, row: int, itemsize: int) -> int:
    if shard.suffix == ".arrow":
        return flips.arrow_scalar_position(shard, column, row)
    return flips.msgpack_scalar_position(shard, column, row, itemsize)


def _expect_corrupt(directory: Path, shard: Path, row: int, sample: int, what: str) -> None:
    with Dataset(directory) as ds, pytest.raises(DataError) as err:
        ds.scalar(ds.manifest.columns[1].name)  # opens every shard
    message = str(err.value)
    assert f"{shard} row {row} (sample {sample}): " in message, message
    assert what in message and "datapipe verify" in message and "\n" not in message


@pytest.mark.parametrize("fmt", FORMATS)
def test_label_outside_the_manifest_classes(images: dict[str, Path], tmp_path: Path,
                                            fmt: str) -> None:
    out = flips.copy_dataset(images[fmt], tmp_path / "ds")
    shard, first, rows = _second_shard(out)
    row = rows - 1
    flips.xor_byte(shard, _scalar_position(shard, "label", row, 8) + 2, 0xFF)
    _expect_corrupt(out, shard, row, first + row, "is not one of the manifest's 2 classes")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("column", "byte", "mask"), [("width", 3, 0x80), ("height", 0, 32)])
def test_impossible_image_size(images: dict[str, Path], tmp_path: Path, fmt: str, column: str,
                               byte: int, mask: int) -> None:
    """A sign bit flipped makes a width negative; height 32 (the short side) with its 32 bit
    flipped is 0."""
    out = flips.copy_dataset(images[fmt], tmp_path / "ds")
    shard, first, _ = _second_shard(out)
    flips.xor_byte(shard, _scalar_position(shard, column, 0, 4) + byte, mask)
    _expect_corrupt(out, shard, 0, first, f"{column} ")


def _token_offsets(shard: Path) -> tuple[int, np.ndarray]:
    at, size = flips.arrow_buffer(shard, "tokens", 1)
    return at, np.frombuffer(shard.read_bytes()[at:at + size], dtype="<i8")


def test_list_offset_out_of_range(texts: dict[str, Path], tmp_path: Path) -> None:
    out = flips.copy_dataset(texts["arrow"], tmp_path / "ds")
    shard, first, _ = _second_shard(out)
    at, _ = _token_offsets(shard)
    flips.xor_byte(shard, at + 8 * 3 + 4, 0x01)  # offset 3 grows by 2**32
    _expect_corrupt(out, shard, 2, first + 2, "column 'tokens' has offsets out of range")


def test_list_offsets_out_of_order(texts: dict[str, Path], tmp_path: Path) -> None:
    out = flips.copy_dataset(texts["arrow"], tmp_path / "ds")
    shard, first, _ = _second_shard(out)
    at, offsets = _token_offsets(shard)
    # One bit that moves offset 2 past offset 3 while staying inside the values.
    bit = next(b for b in range(16) if not offsets[2] >> b & 1
               and offsets[3] < offsets[2] | 1 << b <= offsets[-1])
    flips.xor_byte(shard, at + 8 * 2 + bit // 8, 1 << bit % 8)
    _expect_corrupt(out, shard, 2, first + 2, "out of order")


def test_image_bytes_offset_out_of_range(images: dict[str, Path], tmp_path: Path) -> None:
    out = flips.copy_dataset(images["arrow"], tmp_path / "ds")
    shard, first, _ = _second_shard(out)
    at, _ = flips.arrow_buffer(shard, "image", 1)
    flips.xor_byte(shard, at + 8 * 1 + 5, 0x10)
    _expect_corrupt(out, shard, 0, first, "column 'image' has offsets out of range")


def test_length_that_is_not_the_offsets_span(texts: dict[str, Path], tmp_path: Path) -> None:
    out = flips.copy_dataset(texts["arrow"], tmp_path / "ds")
    shard, first, _ = _second_shard(out)
    flips.xor_byte(shard, flips.arrow_scalar_position(shard, "length", 1), 0x04)
    _expect_corrupt(out, shard, 1, first + 1, "its length column says")


def test_msgpack_record_offsets_out_of_order(texts: dict[str, Path], tmp_path: Path) -> None:
    out = flips.copy_dataset(texts["msgpack"], tmp_path / "ds")
    shard, first, _ = _second_shard(out)
    footer, _ = flips.msgpack_footer(shard)
    at = flips.msgpack_value_position(shard, "offsets", footer["offsets"])
    flips.xor_byte(shard, at + 8 * 2 + 1, 0x40)  # record 2 starts 16 KB later
    _expect_corrupt(out, shard, 2, first + 2, "record offsets out of order")


@pytest.mark.parametrize("fmt", FORMATS)
def test_verify_open_catches_what_decodes_cleanly(images: dict[str, Path], tmp_path: Path,
                                                  fmt: str, monkeypatch) -> None:
    monkeypatch.setattr(integrity, "_verified", set())
    out = flips.copy_dataset(images[fmt], tmp_path / "ds")
    shard, _, _ = _second_shard(out)
    position = flips.entropy_flip_that_still_decodes(shard, 0)
    flips.xor_byte(shard, position, 0x01)
    with Dataset(out) as ds:
        assert len(ds[int(ds.shard_starts[1])]["image"])  # the cheap checks cannot see it
    with Dataset(out, verify="open") as ds:
        ds.shard(0)
        with pytest.raises(DataError, match=f"{shard}: content hash differs from the manifest"):
            ds.shard(1)


def test_verify_open_hashes_each_shard_once_per_process(images: dict[str, Path],
                                                        monkeypatch) -> None:
    hashed: list[str] = []

    def counting_hash(path: Path) -> str:
        hashed.append(Path(path).name)
        return real_hash(path)

    real_hash = integrity.hash_file
    monkeypatch.setattr(integrity, "hash_file", counting_hash)
    monkeypatch.setattr(integrity, "_verified", set())
    for _ in range(2):
        with Dataset(images["arrow"], verify="open") as ds:
            ds.check_hashes()
            ds.scalar("label")
    with Dataset(images["arrow"]) as ds:
        names = [s.name for s in ds.manifest.shards]
        ds.scalar("label")
    assert sorted(hashed) == names


def test_verify_mode_is_checked() -> None:
    with pytest.raises(ArgumentError, match=r"verify must be one of \('cheap', 'open'\)"):
        Dataset(Path("anywhere"), verify="full")
