"""Datasets addressed by URL (s3://, gs://, az://, any fsspec protocol): one directory's objects.

S3 goes through pyarrow's own S3 filesystem (about 1.7x the throughput of s3fs on the same
server, see docs/REMOTE.md); every other protocol through fsspec, wrapped in pyarrow's
filesystem interface so the rest of datapipe sees one API (stores.py opens them, with bounded
waits). Credentials and endpoints come the standard way of each library (for S3: AWS_*
variables, AWS_ENDPOINT_URL included, and the AWS config files); datapipe passes none of its
own. DATAPIPE_REMOTE_BACKEND=fsspec sends S3 through s3fs instead.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from datapipe.errors import ArgumentError, DataError

_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://(.*)$")
_CHUNK = 8 << 20


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
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300] + ("..." if len(text) > 300 else "")


def _open_store(url: str) -> Any:
    """The Store of the URL (see stores.py), or a one-line error."""
    from datapipe.format import stores

    scheme = _URL.match(url).group(1).lower()
    try:
        return stores.open_store(url, scheme)
    except ArgumentError:
        raise
    except ImportError as exc:
        package = stores.missing_package(scheme, exc)
        raise ArgumentError(f"{url}: reading {scheme}:// needs {package} (pip install "
                            f"{package.split()[0]})") from None
    except ValueError as exc:  # fsspec: protocol not known
        raise ArgumentError(f"{url}: {_one_line(exc)}") from None
    except stores.store_errors() as exc:
        raise DataError(f"{url}: cannot open the object store ({_one_line(exc)})") from None


class RemoteDirectory:
    """The objects under one URL prefix. Picklable; each process opens its own connection."""

    def __init__(self, url: str) -> None:
        if not is_url(url):
            raise ArgumentError(f"{url!r} is not a URL")
        self.url = url.rstrip("/")
        self._store: Any = None
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
        return self._opened().fs

    def _opened(self) -> Any:
        if self._pid != os.getpid():
            self._store = _open_store(self.url)
            self._pid = os.getpid()
        return self._store

    def where(self, name: str) -> str:
        """The URL of object `name` (of the prefix for ""), as messages name it."""
        return f"{self.url}/{name}" if name else self.url

    def _path(self, name: str) -> str:
        root = self._opened().root.rstrip("/")
        return f"{root}/{name}" if root else name

    @contextlib.contextmanager
    def _failing(self, name: str, verb: str) -> Iterator[None]:
        """Turn what the storage library raises into one line naming the object (and, when
        the endpoint does not answer, the endpoint and the timeouts). `verb` is read, list,
        write or delete; deleting an object already gone is no failure."""
        from datapipe.format.stores import is_unreachable, store_errors

        try:
            yield
        except store_errors() as exc:
            if isinstance(exc, FileNotFoundError) and verb in ("read", "delete"):
                if verb == "delete":
                    return
                raise MissingObject(f"{self.where(name)}: no such object") from None
            store = self._opened()
            if is_unreachable(exc):
                raise DataError(f"{self.where(name)}: cannot reach {store.endpoint} "
                                f"({_one_line(exc)}); {store.timeouts.describe()}") from None
            raise DataError(f"{self.where(name)}: cannot {verb} ({_one_line(exc)})") from None

    def size(self, name: str) -> int | None:
        """The object's size in bytes; None when there is no such object."""
        from pyarrow.fs import FileType

        with self._failing(name, "read"):
            info = self.fs.get_file_info(self._path(name))
        return info.size if info.type == FileType.File else None

    def sizes(self) -> dict[str, int]:
        """Name -> size of the objects directly under the prefix (none when it is empty)."""
        from pyarrow.fs import FileSelector, FileType

        with self._failing("", "list"):
            infos = self.fs.get_file_info(FileSelector(self._path(""), allow_not_found=True))
        return {i.base_name: i.size for i in infos if i.type == FileType.File}

    def read_bytes(self, name: str) -> bytes:
        with self._failing(name, "read"), self.fs.open_input_stream(self._path(name)) as f:
            return f.read()

    def open_random_access(self, name: str) -> Any:
        """A seekable pyarrow file: range reads, for indexes at known offsets."""
        with self._failing(name, "read"):
            return self.fs.open_input_file(self._path(name))

    def stream(self, name: str) -> Iterator[bytes]:
        """The object's bytes in chunks, as they arrive."""
        with self._failing(name, "read"), self.fs.open_input_stream(self._path(name)) as f:
            while chunk := f.read(_CHUNK):
                yield chunk

    def upload(self, source: Path, name: str) -> None:
        """Copy a local file to object `name` (which appears whole or not at all on S3)."""
        with self._failing(name, "write"), open(source, "rb") as f, \
                self.fs.open_output_stream(self._path(name)) as out:
            while chunk := f.read(_CHUNK):
                out.write(chunk)

    def write_bytes(self, name: str, data: bytes) -> None:
        with self._failing(name, "write"), self.fs.open_output_stream(self._path(name)) as out:
            out.write(data)

    def delete(self, name: str) -> None:
        with self._failing(name, "delete"):
            self.fs.delete_file(self._path(name))
