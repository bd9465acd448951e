"""Reading an input file that holds many samples (a tar, a Parquet file), on this machine or by
URL through datapipe's remote layer, as a conversion worker needs it: byte ranges, a forward
pass over the file, or a seekable file for pyarrow.

Each process opens its own connection to a store (RemoteDirectory does so after a fork), once
per folder of inputs, not once per read.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from datapipe.errors import DataError
from datapipe.format.remote import RemoteDirectory, is_url


@dataclass(frozen=True)
class InputFile:
    """One file SRC names: where it is and what messages and the `path` column call it."""

    location: str  # an absolute local path, or a URL
    name: str  # relative to the folder (or URL prefix) SRC names
    size: int

    @property
    def is_url(self) -> bool:
        return is_url(self.location)


def describe_files(files: tuple[InputFile, ...]) -> str:
    """The files as a message names them: the first two, and how many in all."""
    names = ", ".join(f.name for f in files[:2])
    return names if len(files) <= 2 else f"{names}, ... ({len(files)} files)"


@functools.cache
def remote_folder(url: str) -> RemoteDirectory:
    """One RemoteDirectory per folder of inputs and process: its connection is reused."""
    return RemoteDirectory(url)


def _remote(location: str) -> tuple[RemoteDirectory, str]:
    folder, _, name = location.rpartition("/")
    return remote_folder(folder), name


def remote_listing(url: str) -> dict[str, int]:
    """Name -> size of the objects directly under a URL prefix."""
    return remote_folder(url.rstrip("/")).sizes()


def remote_size(url: str) -> int | None:
    """The size of the object at `url`; None when there is none."""
    folder, name = _remote(url)
    return folder.size(name)


class RangeReader:
    """Byte ranges of one input file: os.pread here, a range request by URL."""

    def __init__(self, file: InputFile) -> None:
        self.file = file
        if file.is_url:
            folder, name = _remote(file.location)
            self._remote: Any = folder.open_random_access(name)
        else:
            self._fd = os.open(file.location, os.O_RDONLY)

    def read(self, offset: int, size: int) -> bytes:
        """`size` bytes from `offset`; fewer only where the file ends before."""
        if not self.file.is_url:
            return os.pread(self._fd, size, offset)
        try:
            return self._remote.read_at(size, offset)
        except OSError as exc:
            raise DataError(f"{self.file.location}: cannot read bytes {offset}..{offset + size} "
                            f"({exc})") from None

    def close(self) -> None:
        if self.file.is_url:
            self._remote.close()
        else:
            os.close(self._fd)

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def open_forward(file: InputFile) -> Any:
    """A file object read from start to end, seeking only forward (what `tarfile` needs to
    list members): the file itself here; by URL one stream, read once, never range by range."""
    if not file.is_url:
        return open(file.location, "rb")  # the caller closes it
    folder, name = _remote(file.location)
    return ForwardReader(folder.stream(name))


def open_seekable(file: InputFile) -> Any:
    """A seekable file for pyarrow (Parquet): the path here, a random-access file by URL."""
    if not file.is_url:
        return file.location
    folder, name = _remote(file.location)
    return folder.open_random_access(name)


class ForwardReader:
    """A file object over a stream of chunks that seeks forward by reading on: a remote tar is
    listed in one pass, as fast as the store streams, instead of one request per member."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = b""
        self._at = 0  # position of the buffer's first byte in the file
        self._used = 0  # bytes of the buffer already read

    def tell(self) -> int:
        return self._at + self._used

    def read(self, size: int = -1) -> bytes:
        parts = []
        while size != 0:
            if self._used == len(self._buffer) and not self._refill():
                break
            take = len(self._buffer) - self._used if size < 0 else \
                min(size, len(self._buffer) - self._used)
            parts.append(self._buffer[self._used:self._used + take])
            self._used += take
            size -= take if size > 0 else 0
        return b"".join(parts)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        target = offset if whence == os.SEEK_SET else self.tell() + offset
        if whence not in (os.SEEK_SET, os.SEEK_CUR) or target < self.tell():
            raise OSError(f"cannot seek back to {target} in a stream at {self.tell()}")
        while target > self._at + len(self._buffer):
            if not self._refill():
                self._used = len(self._buffer)  # past the end, as a file allows
                self._at = target - self._used
                return target
        self._used = target - self._at
        return target

    def _refill(self) -> bool:
        self._at += len(self._buffer)
        self._buffer, self._used = next(self._chunks, b""), 0
        return bool(self._buffer)

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> ForwardReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
