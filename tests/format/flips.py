"""Find where a value lives inside a real shard file, and flip bytes there.

Offsets come from the file's own structure (Arrow buffer addresses relative to the mapping; the
msgpack footer's index), never from hard-coded positions.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import msgpack
import numpy as np
import pyarrow as pa

from datapipe.format.msgpack_shard import _TAIL, MAGIC


def copy_dataset(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def first_shard(directory: Path) -> Path:
    return sorted(directory.glob("shard-*"))[0]


def xor_byte(path: Path, position: int, mask: int) -> None:
    """Flip the bits of `mask` in one byte of the file, keeping its size."""
    data = bytearray(path.read_bytes())
    data[position] ^= mask
    path.write_bytes(bytes(data))


def arrow_buffer(path: Path, column: str, index: int) -> tuple[int, int]:
    """(file offset, size) of buffer `index` of a column of the shard's first record batch:
    1 = offsets or scalar values, 2 = binary bytes, 3 = list values."""
    source = pa.memory_map(str(path))
    base = source.read_buffer(1).address
    source.seek(0)
    buffer = pa.ipc.open_file(source).get_batch(0).column(column).buffers()[index]
    return buffer.address - base, buffer.size


def arrow_scalar_position(path: Path, column: str, row: int) -> int:
    """File offset of the first byte of a fixed-width scalar's value."""
    start, _ = arrow_buffer(path, column, 1)
    source = pa.memory_map(str(path))
    width = pa.ipc.open_file(source).schema.field(column).type.bit_width // 8
    return start + row * width


def msgpack_footer(path: Path) -> tuple[dict, int]:
    data = path.read_bytes()
    tail = len(MAGIC) + _TAIL.size
    (length,) = _TAIL.unpack(data[-tail:-len(MAGIC)])
    start = len(data) - tail - length
    return msgpack.unpackb(data[start:start + length], raw=False), start


def msgpack_value_position(path: Path, key: str, raw: bytes) -> int:
    """File offset of the `bin` value `raw` stored under `key` in the msgpack footer."""
    packed_key, packed = msgpack.packb(key), msgpack.packb(raw, use_bin_type=True)
    data = path.read_bytes()
    _, footer_start = msgpack_footer(path)
    at = data.index(packed_key + packed, footer_start)
    return at + len(packed_key) + len(packed) - len(raw)


def msgpack_scalar_position(path: Path, column: str, row: int, itemsize: int) -> int:
    footer, _ = msgpack_footer(path)
    raw = footer["scalars"][column]
    return msgpack_value_position(path, column, raw) + row * itemsize


def msgpack_record(path: Path, row: int) -> tuple[int, int]:
    """(start, end) file offsets of a record."""
    footer, _ = msgpack_footer(path)
    offsets = np.frombuffer(footer["offsets"], dtype="<u8")
    return int(offsets[row]), int(offsets[row + 1])


def arrow_payload_span(path: Path, column: str, row: int) -> tuple[int, int]:
    """(start, end) file offsets of one row's bytes in a large_binary column."""
    offsets_at, size = arrow_buffer(path, column, 1)
    data_at, _ = arrow_buffer(path, column, 2)
    offsets = np.frombuffer(path.read_bytes()[offsets_at:offsets_at + size], dtype="<i8")
    return data_at + int(offsets[row]), data_at + int(offsets[row + 1])


def jpeg_span(path: Path, row: int) -> tuple[int, int]:
    """(start, end) file offsets of the JPEG stored in a row of an image shard."""
    if path.suffix == ".arrow":
        return arrow_payload_span(path, "image", row)
    start, end = msgpack_record(path, row)
    data = path.read_bytes()
    soi = data.index(b"\xff\xd8\xff", start, end)
    return soi, data.index(b"\xff\xd9", soi, end) + 2


def entropy_flip_that_still_decodes(path: Path, row: int) -> int:
    """File offset of a byte in a JPEG's entropy-coded data whose lowest bit, flipped, leaves
    a JPEG libjpeg decodes without a warning, to different pixels: damage only a hash sees."""
    from datapipe.image._jpeg import decode_region

    start, end = jpeg_span(path, row)
    jpeg = path.read_bytes()[start:end]
    sos = jpeg.index(b"\xff\xda")
    scan = sos + 2 + int.from_bytes(jpeg[sos + 2:sos + 4], "big")
    clean = decode_region(jpeg, 0, 0, 1 << 30, 1 << 30, 1)[0]
    for at in range((scan + len(jpeg)) // 2, len(jpeg) - 2):
        if 0xFF in (jpeg[at], jpeg[at] ^ 1, jpeg[at - 1]):  # markers and stuffed bytes
            continue
        damaged = bytearray(jpeg)
        damaged[at] ^= 1
        try:
            pixels = decode_region(bytes(damaged), 0, 0, 1 << 30, 1 << 30, 1)[0]
        except ValueError:
            continue
        if pixels != clean:
            return start + at
    raise AssertionError(f"no silently decodable flip in row {row} of {path}")
