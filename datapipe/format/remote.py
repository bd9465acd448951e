"""Datasets addressed by URL (s3://, gs://, az://, any fsspec protocol): one directory's objects.

S3 goes through pyarrow's own S3 filesystem (about 1.7x the throughput of s3fs on the same
server, see docs/REMOTE.md); every other protocol through fsspec, wrapped in pyarrow's
filesystem interface so the rest of datapipe sees one API. Credentials and endpoints come the
standard way of each library (for S3: AWS_* variables, AWS_ENDPOINT_URL included, and the AWS
config files); datapipe passes none of its own. DATAPIPE_REMOTE_BACKEND=fsspec sends S3 through
s3fs instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from datapipe.errors import ArgumentError, DataError

_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://(.*)$")
_CHUNK = 8 << 20
BACKEND_ENV = "DATAPIPE_REMOTE_BACKEND"


def is_url(location: object) -> bool:
    """A string naming a remote directory (file:// names a local one)."""
    if not isinstance(location, str):
        return False
    match = _URL.match(location)
    return match is not None and match.group(1).lower() != "file"


def local_path(location: str | Path) -> Path:
    """A local location as a Path (a file:// URL loses its scheme)."""
    text = str(location)
    return Path(text[len("file://"):]) if text.lower().startswith("file://") else Path(text)


class MissingObject(DataError):
    """No object of that name under the URL."""


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("..." if len(text) > 300 else "")


def _open_filesystem(url: str) -> tuple[Any, str]:
    """(pyarrow FileSystem, path of the directory inside it)."""
    scheme = _URL.match(url).group(1).lower()
    backend = os.environ.get(BACKEND_ENV, "")
    if backend not in ("", "arrow", "fsspec"):
        raise ArgumentError(f"{BACKEND_ENV}={backend!r}: give 'arrow' or 'fsspec'")
    try:
        if scheme == "s3" and backend != "fsspec":
            from pyarrow.fs import FileSystem

            return FileSystem.from_uri(url)
        import fsspec
        from pyarrow.fs import FSSpecHandler, PyFileSystem

        fs, path = fsspec.core.url_to_fs(url)
        return PyFileSystem(FSSpecHandler(fs)), path
    except ImportError as exc:
        raise ArgumentError(f"{url}: reading {scheme}:// needs {exc.name or 'fsspec'} "
                            "(pip install fsspec and the package for the protocol, e.g. "
                            "s3fs, gcsfs, adlfs)") from None
    except ValueError as exc:  # fsspec: protocol not known
        raise ArgumentError(f"{url}: {_one_line(exc)}") from None
    except OSError as exc:
        raise DataError(f"{url}: cannot open the object store ({_one_line(exc)})") from None


class RemoteDirectory:
    """The objects under one URL prefix. Picklable; each process opens its own connection."""

    def __init__(self, url: str) -> None:
        if not is_url(url):
            raise ArgumentError(f"{url!r} is not a URL")
        self.url = url.rstrip("/")
        self._fs: Any = None
        self._root = ""
        self._pid = -1

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"])

    def __str__(self) -> str:
        return self.url

    @property
    def fs(self) -> Any:
        """This process's filesystem (a forked child opens its own)."""
        if self._pid != os.getpid():
            self._fs, root = _open_filesystem(self.url)
            self._root = root.rstrip("/")
            self._pid = os.getpid()
        return self._fs

    def where(self, name: str) -> str:
        """The URL of object `name`, as messages name it."""
        return f"{self.url}/{name}"

    def _path(self, name: str) -> str:
        if self._pid != os.getpid():
            self.fs  # noqa: B018 - opening the filesystem sets the root
        return f"{self._root}/{name}" if self._root else name

    def size(self, name: str) -> int | None:
        """The object's size in bytes; None when there is no such object."""
        from pyarrow.fs import FileType

        try:
            info = self.fs.get_file_info(self._path(name))
        except OSError as exc:
            raise DataError(f"{self.where(name)}: cannot read ({_one_line(exc)})") from None
        return info.size if info.type == FileType.File else None

    def sizes(self) -> dict[str, int]:
        """Name -> size of the objects directly under the prefix (none when it is empty)."""
        from pyarrow.fs import FileSelector, FileType

        try:
            infos = self.fs.get_file_info(FileSelector(self._path(""), allow_not_found=True))
        except OSError as exc:
            raise DataError(f"{self.url}: cannot list ({_one_line(exc)})") from None
        return {i.base_name: i.size for i in infos if i.type == FileType.File}

    def read_bytes(self, name: str) -> bytes:
        try:
            with self.fs.open_input_stream(self._path(name)) as f:
                return f.read()
        except FileNotFoundError:
            raise MissingObject(f"{self.where(name)}: no such object") from None
        except OSError as exc:
            raise DataError(f"{self.where(name)}: cannot read ({_one_line(exc)})") from None

    def open_random_access(self, name: str) -> Any:
        """A seekable pyarrow file: range reads, for indexes at known offsets."""
        try:
            return self.fs.open_input_file(self._path(name))
        except FileNotFoundError:
            raise MissingObject(f"{self.where(name)}: no such object") from None
        except OSError as exc:
            raise DataError(f"{self.where(name)}: cannot read ({_one_line(exc)})") from None

    def stream(self, name: str) -> Iterator[bytes]:
        """The object's bytes in chunks, as they arrive."""
        try:
            with self.fs.open_input_stream(self._path(name)) as f:
                while chunk := f.read(_CHUNK):
                    yield chunk
        except FileNotFoundError:
            raise MissingObject(f"{self.where(name)}: no such object") from None
        except OSError as exc:
            raise DataError(f"{self.where(name)}: cannot read ({_one_line(exc)})") from None

    def upload(self, source: Path, name: str) -> None:
        """Copy a local file to object `name` (which appears whole or not at all on S3)."""
        try:
            with open(source, "rb") as f, self.fs.open_output_stream(self._path(name)) as out:
                while chunk := f.read(_CHUNK):
                    out.write(chunk)
        except OSError as exc:
            raise DataError(f"{self.where(name)}: cannot write ({_one_line(exc)})") from None

    def write_bytes(self, name: str, data: bytes) -> None:
        try:
            with self.fs.open_output_stream(self._path(name)) as out:
                out.write(data)
        except OSError as exc:
            raise DataError(f"{self.where(name)}: cannot write ({_one_line(exc)})") from None

    def delete(self, name: str) -> None:
        try:
            self.fs.delete_file(self._path(name))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise DataError(f"{self.where(name)}: cannot delete ({_one_line(exc)})") from None
