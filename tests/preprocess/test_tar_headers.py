"""The tar header reader finds every member where Python's tarfile finds it, in each format
tarfile writes (GNU long names, pax, ustar prefixes) and from a stream that only reads on."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from preprocess.file_access import ForwardReader
from preprocess.tar_headers import TarDamage, read_headers
from tests.preprocess.sample_files import add_member

LONG = "folder-" + "x" * 90 + "/" + "n" * 120  # over ustar's 100 bytes, and over its prefix


def _archive(path: Path, tar_format: int) -> Path:
    with tarfile.open(path, "w", format=tar_format) as tar:
        add_member(tar, "a.jpg", b"\xff" * 700)
        add_member(tar, f"{LONG}.cls", "3")
        add_member(tar, "dir-" + "d" * 80 + "/" + "e" * 80 + ".txt", "a caption")
        add_member(tar, "caf\udce9.txt", "named in Latin-1")
        add_member(tar, "empty.txt", b"")
        folder = tarfile.TarInfo("a-folder")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        link = tarfile.TarInfo("b.jpg")
        link.type, link.linkname = tarfile.SYMTYPE, "a.jpg"
        tar.addfile(link)
        add_member(tar, "big.bin", bytes(range(256)) * 40)
    return path


@pytest.mark.parametrize("tar_format", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("stream", [False, True])
def test_members_are_where_tarfile_finds_them(tmp_path: Path, tar_format: int,
                                              stream: bool) -> None:
    path = _archive(tmp_path / "t.tar", tar_format)
    with tarfile.open(path) as tar:
        expected = [(m.name, m.offset, m.offset_data, m.size, m.isreg(), m.isdir())
                    for m in tar.getmembers()]
    data = path.read_bytes()
    raw = ForwardReader(iter([data[i:i + 1000] for i in range(0, len(data), 1000)])) \
        if stream else io.BytesIO(data)
    got = [(h.name, h.offset, h.offset_data, h.size, h.is_file, h.is_dir)
           for h in read_headers(raw, len(data))]
    assert got == expected


def test_a_ustar_name_in_two_parts_is_joined(tmp_path: Path) -> None:
    name = "p" * 90 + "/" + "q" * 90 + ".jpg"
    with tarfile.open(tmp_path / "t.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        add_member(tar, name, b"x")
    with open(tmp_path / "t.tar", "rb") as raw:
        (header,) = read_headers(raw, (tmp_path / "t.tar").stat().st_size)
    assert header.name == name


def test_a_bad_checksum_is_named_with_its_byte(tmp_path: Path) -> None:
    path = _archive(tmp_path / "t.tar", tarfile.GNU_FORMAT)
    with tarfile.open(path) as tar:
        second = tar.getmembers()[1].offset
    data = bytearray(path.read_bytes())
    data[second + 5] ^= 0xFF  # a byte of the second member's first header block
    with pytest.raises(TarDamage, match=f"corrupt at byte {second}: not a tar header"):
        list(read_headers(io.BytesIO(bytes(data)), len(data)))


@pytest.mark.parametrize("damaged", [False, True])
def test_a_header_of_high_bytes_is_checked_as_any_other(tmp_path: Path, damaged: bool) -> None:
    """Header checksums are summed through adler32 where a block's bytes cannot pass its
    modulus; a header of hundreds of high bytes (a long Latin-1 name in ustar's prefix, a link
    to another) sums past it, and is checked by its exact sum."""
    name, target = "\udcff" * 150 + "/" + "\udcfe" * 99, "\udcfd" * 100
    with tarfile.open(tmp_path / "t.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        link = tarfile.TarInfo(name)
        link.type, link.linkname = tarfile.SYMTYPE, target
        tar.addfile(link)
    data = bytearray((tmp_path / "t.tar").read_bytes())
    assert sum(data[:512]) > 65521
    if damaged:
        data[200] ^= 0x01  # a byte of the link's target
        with pytest.raises(TarDamage, match="not a tar archive"):
            list(read_headers(io.BytesIO(bytes(data)), len(data)))
    else:
        (header,) = read_headers(io.BytesIO(bytes(data)), len(data))
        assert header.name == name and not header.is_file
