"""Checks that keep corrupt shard bytes from coming back as wrong values.

verify="cheap" (the default): as a shard is opened, its structure (offsets in range and
monotonic) and its scalar columns (labels against the manifest's classes, image sizes, token
lengths against the offsets), and the sizes of its fixed-shape arrays, are checked with a few
vectorised passes over its index, never over its payload; the loaders add per-batch checks
on data their workers already hold.
verify="open" also hashes each shard against the manifest before its first use, once per
process tree: a process forked after a shard was verified inherits the result.

The passes over a shard's index are paid once per file, not by every process that opens it:
a Dataset records on the node (check_marks.py, beside the dataset's derived files) that a
file passed them, and the next process (a worker, another rank, a resumed run) opening the
same unchanged file keeps only the checks that cost nothing per row: the file opens, its
columns and their types, its row count against the manifest, Arrow's basic validation, the
first and last msgpack record offsets. A marker vouches for a file by its size, mtime and
inode, under one manifest and one version of these checks; a file rewritten, replaced or
touched is checked again. A marker does not vouch for the bytes: a file modified in place
that keeps its size and has its mtime set back is not checked again with verify="cheap".
verify="open" hashes its content whatever the markers say, and `datapipe verify` ignores
them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from datapipe.errors import ArgumentError, DataError
from datapipe.format.check_marks import CheckMarks, file_stamp
from datapipe.format.hashing import hash_file
from datapipe.format.manifest import Manifest, ShardInfo
from datapipe.format.schema import Column
from datapipe.format.shard_formats import open_shard
from datapipe.format.shard_reader import ShardReader

VERIFY_MODES = ("cheap", "open")
MAX_JPEG_SIDE = 65535  # a JPEG header cannot state a larger width or height

# Shards hashed and found intact by this process or its parent before the fork: (path, device,
# inode, size, mtime, expected hash). A file replaced or rewritten gets a new key.
_verified: set[tuple] = set()


def check_verify_mode(verify: object) -> str:
    if not isinstance(verify, str) or verify not in VERIFY_MODES:
        raise ArgumentError(f"verify must be one of {VERIFY_MODES}, got {verify!r}")
    return verify


def shard_file_problem(path: Path, info: ShardInfo) -> str | None:
    """What is wrong with a shard file against its manifest entry (None: it is intact)."""
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if size != info.bytes:
        return f"size {size} bytes, manifest says {info.bytes}"
    if hash_file(path) != info.hash:
        return "content hash differs from the manifest"
    return None


def check_shard_hash(path: Path, info: ShardInfo) -> None:
    """Raise a DataError naming the shard unless its bytes hash as the manifest says; each
    file is hashed once per process tree."""
    key = _file_key(path, info)
    if key is None or key in _verified:  # a missing file is the reader's to report
        return
    problem = shard_file_problem(path, info)
    if problem is not None:
        raise DataError(f"{path}: {problem}; the shard is corrupt or was replaced (run "
                        f"`datapipe verify {path.parent}`)")
    _verified.add(key)


def _file_key(path: Path, info: ShardInfo) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, info.hash)


def open_checked(path: Path, manifest: Manifest, k: int, first_sample: int, where: str,
                 dataset: str, marks: CheckMarks | None = None) -> ShardReader:
    """Shard k of the manifest, opened with every check a reader makes when it opens one: its
    structure and column types, its row count against the manifest, its scalar values. With
    `marks`, a file they vouch for skips the checks that read every row, and a file that
    passes them is marked."""
    info = manifest.shards[k]
    stamp = file_stamp(path) if marks is not None else None  # before the checks read it
    vouched = stamp is not None and marks is not None and marks.vouches(path, info, stamp)
    reader = open_shard(path, manifest.shard_format, manifest.columns, first_sample, where,
                        dataset, check_index=not vouched)
    try:
        if reader.num_rows != info.rows:
            raise reader.corrupt_shard(f"holds {reader.num_rows} rows, manifest says "
                                       f"{info.rows}")
        if not vouched:
            check_shard_values(reader, manifest)
    except DataError:
        reader.close()
        raise
    if stamp is not None and marks is not None and not vouched:
        marks.record(path, info, stamp)
    return reader


def check_shard_values(reader: ShardReader, manifest: Manifest) -> None:
    """Range checks of a freshly opened shard's scalar columns against the manifest."""
    if manifest.classes is not None and "label" in reader.columns:
        classes = len(manifest.classes)
        _check_range(reader, "label", 0, classes, f"is not one of the manifest's {classes} "
                     "classes")
    if manifest.kind == "images":
        jpeg = manifest.settings.get("encoding", "jpeg") == "jpeg"
        top = MAX_JPEG_SIDE + 1 if jpeg else np.iinfo(np.int64).max
        for name in ("height", "width"):
            if name in reader.columns:
                _check_range(reader, name, 1, top, "is not a possible image size")
    if "tokens" in reader.columns and "length" in reader.columns:
        _check_token_lengths(reader)
    for column in reader.columns.values():
        if column.shape is not None:
            _check_array_sizes(reader, column)


def _check_range(reader: ShardReader, name: str, low: int, high: int, problem: str) -> None:
    values = reader.scalar(name)
    bad = (values < low) | (values >= high)
    if bad.any():
        row = int(np.argmax(bad))
        raise reader.corrupt(row, f"{name} {values[row]} {problem}")


def _check_token_lengths(reader: ShardReader) -> None:
    """A document's `length` must be what its token offsets span (where the format has
    offsets; msgpack records are checked as they are read)."""
    spans = reader.payload_lengths("tokens")
    if spans is None:
        return
    lengths = reader.scalar("length")
    bad = spans != lengths
    if bad.any():
        row = int(np.argmax(bad))
        raise reader.corrupt(row, f"holds {spans[row]} tokens, its length column says "
                                  f"{lengths[row]}")


def _check_array_sizes(reader: ShardReader, column: Column) -> None:
    """Each fixed-shape array must hold its shape's numbers (where the format has offsets;
    msgpack records are checked as they are read)."""
    spans = reader.payload_lengths(column.name)
    if spans is None:
        return
    bad = spans != column.size
    if bad.any():
        row = int(np.argmax(bad))
        raise reader.corrupt(row, f"column {column.name!r} holds {spans[row]} numbers, not "
                                  f"{column.size} (shape {column.shape})")
