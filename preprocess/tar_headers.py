"""The member headers of a tar, read in one forward pass: where each member's data lies.

A reader of its own rather than `tarfile`, for two reasons. Speed: tarfile decodes every field
of every header (owners, times, devices), and the pax header WebDataset's writer puts before
each member doubles that; listing the tars was a tenth of a conversion's work, and it is done
before any image is converted. And cuts: tarfile ends quietly at a cut between members or a
garbled header; here the end of the file is known, so every way a tar can end short says
where. Read: POSIX ustar, GNU and v7 headers, pax extended headers (path, size) and GNU long
names; sparse files, links and devices are members that are not files.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

BLOCK = 512
_REGULAR = (b"0", b"\0", b"7")
# Headers that describe the next member, or the archive: pax (x, g), GNU long names (L, K).
_EXTENSIONS = (b"x", b"g", b"L", b"K")
_ZERO = bytes(BLOCK)
_ADLER_MODULUS = 65521


@dataclass(frozen=True)
class Header:
    name: str
    offset: int  # of its (first) header block
    offset_data: int
    size: int
    is_file: bool
    is_dir: bool


class TarDamage(Exception):
    """The tar ends short of where its headers say, or a header is not one."""

    def __init__(self, at: int, reason: str, member: str | None = None) -> None:
        super().__init__(reason)
        self.at = at
        self.member = member  # the member cut short, if one is


def read_headers(file: Any, file_size: int) -> Iterator[Header]:
    """Every member of the tar `file` (positioned at its start, `file_size` bytes long), in
    order. The caller may read a member's data (seek to its offset_data, read) before asking
    for the next: this reader only ever seeks forward, so the file may be a stream."""
    offset = 0
    extended: dict[str, str] = {}  # from a pax or GNU long-name header, for the next member
    first = offset
    while True:
        if offset + BLOCK > file_size:
            raise TarDamage(offset, _end_problem(offset, file_size))
        file.seek(offset)
        block = file.read(BLOCK)
        if block == _ZERO:
            return
        _check_sum(block, offset)
        kind, size = block[156:157], _number(block[124:136], offset)
        name = None
        if kind not in _EXTENSIONS:
            size, name = int(extended.get("size", size)), extended.get("path") or _name(block)
        data = offset + BLOCK
        if data + size > file_size:
            raise TarDamage(offset, f"cut short at byte {file_size}: member {name or 'header'} "
                            f"needs {size} bytes from byte {data}", name)
        if kind == b"x":
            extended.update(_pax(file.read(size)))
        elif kind == b"L":
            extended["path"] = _text(file.read(size).split(b"\0", 1)[0])
        elif name is not None:
            is_dir = kind == b"5" or (kind in _REGULAR and name.endswith("/"))
            yield Header(name.rstrip("/") if is_dir else name, first, data, size,
                         kind in _REGULAR and not is_dir, is_dir)
            extended = {}
        offset = data + -(-size // BLOCK) * BLOCK
        if not extended:
            first = offset


def _end_problem(offset: int, file_size: int) -> str:
    if offset >= file_size:
        return (f"cut short at byte {file_size}: it ends without the end-of-archive marker" if
                offset == file_size else f"cut short at byte {file_size}: its last member's "
                f"padding, up to byte {offset}, is missing")
    return (f"cut short at byte {file_size}: the member header at byte {offset} is "
            "incomplete")


def _check_sum(block: bytes, offset: int) -> None:
    """The header's checksum: the sum of its bytes, the checksum field counted as spaces."""
    try:
        stored = int(block[148:156].replace(b"\0", b" ").strip() or b"-1", 8)
    except ValueError:
        stored = -1
    unsigned = _byte_sum(block) - sum(block[148:156]) + 8 * 32
    if stored != unsigned and stored != unsigned - 256 * _high_bytes(block):  # old tars: signed
        raise TarDamage(offset, f"corrupt at byte {offset}: not a tar header" if offset else
                        "not a tar archive (no tar header at its start)")


def _byte_sum(block: bytes) -> int:
    """sum(block), a quarter of the time for a header (two blocks per member, WebDataset's pax
    headers counted): adler32's low half is 1 + the bytes' sum modulo 65521, which is the sum
    itself when the block's non-zero bytes cannot add up to more than 65519."""
    if 255 * (BLOCK - block.count(0)) < _ADLER_MODULUS - 1:
        return (zlib.adler32(block) & 0xFFFF) - 1
    return sum(block)


def _high_bytes(block: bytes) -> int:
    return sum(b > 127 for b in block[:148] + block[156:])


def _number(field: bytes, offset: int) -> int:
    """An octal field, or GNU's base-256 for sizes of 8 GiB and more."""
    if field[0] & 0x80:
        return int.from_bytes(field[1:], "big")
    try:
        return int(field.replace(b"\0", b" ").strip() or b"0", 8)
    except ValueError:
        raise TarDamage(offset, f"corrupt at byte {offset}: a size that is no number") \
            from None


def _name(block: bytes) -> str:
    name = block[:100].split(b"\0", 1)[0]
    if block[257:263] == b"ustar\0":  # POSIX: a long name's first part is in the prefix
        prefix = block[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    return _text(name)


def _pax(payload: bytes) -> dict[str, str]:
    """Records `LENGTH KEY=VALUE\\n` of a pax header: the path and size it sets."""
    records, at = {}, 0
    while at < len(payload):
        space = payload.find(b" ", at)
        if space < 0:
            break
        length = int(payload[at:space] or 0)
        if length <= 0:
            break
        key, _, value = payload[space + 1:at + length - 1].partition(b"=")
        if key in (b"path", b"size"):
            records[key.decode()] = _text(value)
        at += length
    return records


def _text(name: bytes) -> str:
    return name.decode("utf-8", "surrogateescape")  # as tarfile names what is not UTF-8
