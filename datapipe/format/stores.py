"""The filesystem behind a URL: which library reads it, which endpoint, and how long to wait.

S3 goes through pyarrow's own S3 filesystem, made here rather than parsed from the URL so that
every request has a connect and a read timeout and a bounded number of attempts: a store that
accepts connections and never answers (a stuck proxy) is an error naming its endpoint after at
most attempts x (connect + read) seconds, not a hang. DATAPIPE_REMOTE_BACKEND=fsspec sends S3
through s3fs with the same bounds (botocore's). Every other protocol goes through fsspec with
its own library's settings.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from pyarrow import PythonFile
from pyarrow.fs import FSSpecHandler, PyFileSystem

from datapipe.errors import ArgumentError

BACKEND_ENV = "DATAPIPE_REMOTE_BACKEND"
CONNECT_TIMEOUT_ENV = "DATAPIPE_REMOTE_CONNECT_TIMEOUT"
READ_TIMEOUT_ENV = "DATAPIPE_REMOTE_READ_TIMEOUT"
# Tries of one request (the first included). A retry on a fresh connection cures most stalls;
# more would only multiply the wait for a store that is down.
ATTEMPTS = 3
S3_SCHEMES = ("s3", "s3a")


@dataclass(frozen=True)
class Timeouts:
    """Seconds to wait for a connection, and for the next byte of an answer. The read timeout
    bounds a silence, not a transfer: a large object may stream for as long as bytes come."""

    connect: float = 10.0
    read: float = 20.0

    def __post_init__(self) -> None:
        for name, env in (("connect", CONNECT_TIMEOUT_ENV), ("read", READ_TIMEOUT_ENV)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value <= 0:
                raise ArgumentError(f"{name} timeout must be a number of seconds > 0, got "
                                    f"{value!r} ({env})")

    @classmethod
    def from_environment(cls) -> Timeouts:
        return cls(connect=_seconds(CONNECT_TIMEOUT_ENV, cls.connect),
                   read=_seconds(READ_TIMEOUT_ENV, cls.read))

    def describe(self) -> str:
        return (f"timeouts {self.connect:g} s to connect, {self.read:g} s for each answer, "
                f"{ATTEMPTS} attempts (set {CONNECT_TIMEOUT_ENV}, {READ_TIMEOUT_ENV})")


def _seconds(env: str, default: float) -> float:
    text = os.environ.get(env, "").strip()
    if not text:
        return default
    try:
        return float(text)
    except ValueError:
        raise ArgumentError(f"{env}={text!r}: give a number of seconds") from None


@dataclass(frozen=True)
class Store:
    """An opened URL: the filesystem (pyarrow's interface), the URL's path inside it, and the
    endpoint as messages name it."""

    fs: Any
    root: str
    endpoint: str
    timeouts: Timeouts


def backend() -> str:
    name = os.environ.get(BACKEND_ENV, "")
    if name not in ("", "arrow", "fsspec"):
        raise ArgumentError(f"{BACKEND_ENV}={name!r}: give 'arrow' or 'fsspec'")
    return name or "arrow"


def open_store(url: str, scheme: str) -> Store:
    """The filesystem for `url` (whose scheme is `scheme`). Raises ImportError when the
    library for the protocol is missing, ValueError for a protocol fsspec does not know."""
    timeouts = Timeouts.from_environment()
    if scheme in S3_SCHEMES and backend() == "arrow":
        return _arrow_s3(url, timeouts)
    return _fsspec(url, scheme, timeouts)


def s3_endpoint() -> str | None:
    """The S3 endpoint the environment names, as boto3 reads it (None: AWS itself)."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def _arrow_s3(url: str, timeouts: Timeouts) -> Store:
    from pyarrow.fs import AwsStandardS3RetryStrategy, S3FileSystem, resolve_s3_region

    path = url.split("://", 1)[1]
    if "?" in path:
        raise ArgumentError(f"{url}: options in an s3:// URL are not read; set AWS_REGION or "
                            "AWS_ENDPOINT_URL instead")
    options: dict[str, Any] = {
        "connect_timeout": timeouts.connect, "request_timeout": timeouts.read,
        "retry_strategy": AwsStandardS3RetryStrategy(max_attempts=ATTEMPTS)}
    endpoint = s3_endpoint()
    if endpoint is not None:
        scheme, _, host = endpoint.rpartition("://")
        options.update(endpoint_override=host.rstrip("/"), scheme=scheme or "https")
    else:  # as FileSystem.from_uri does: a bucket is served from its own region
        options["region"] = resolve_s3_region(path.split("/", 1)[0])
    fs = S3FileSystem(**options)
    return Store(fs, path, endpoint or f"https://s3.{fs.region}.amazonaws.com", timeouts)


def _fsspec(url: str, scheme: str, timeouts: Timeouts) -> Store:
    import fsspec

    if scheme not in S3_SCHEMES:
        fs, path = fsspec.core.url_to_fs(url)
        endpoint = f"{scheme}:// ({type(fs).__module__.split('.')[0]})"
        return Store(PyFileSystem(_FsspecHandler(fs)), path, endpoint, timeouts)
    endpoint = s3_endpoint()
    fs, path = fsspec.core.url_to_fs(url, endpoint_url=endpoint, config_kwargs={
        "connect_timeout": timeouts.connect, "read_timeout": timeouts.read,
        "retries": {"total_max_attempts": ATTEMPTS, "mode": "standard"}})
    fs.retries = 1  # s3fs's own retries would multiply botocore's attempts
    return Store(PyFileSystem(_FsspecHandler(fs)), path, endpoint or "AWS S3", timeouts)


class _FsspecHandler(FSSpecHandler):
    """pyarrow's handler asks `isfile` before opening, and fsspec's `isfile` answers False for
    any error: an endpoint that times out would read as a missing object. Opening directly
    lets the real error through (a missing object is still a FileNotFoundError)."""

    def open_input_stream(self, path: str) -> Any:
        return PythonFile(self.fs.open(path, mode="rb"), mode="r")

    def open_input_file(self, path: str) -> Any:
        return PythonFile(self.fs.open(path, mode="rb"), mode="r")


def missing_package(scheme: str, exc: ImportError) -> str:
    """The package to install for a protocol whose library failed to import."""
    if exc.name == "fsspec":
        return "fsspec and the package for the protocol (s3fs, gcsfs, adlfs, ...)"
    from fsspec.registry import known_implementations

    known = known_implementations.get(scheme)
    return known["class"].split(".")[0] if known else (exc.name or "fsspec")


def store_errors() -> tuple[type[BaseException], ...]:
    """What the storage libraries raise for a request that failed: OSError from pyarrow and
    most of fsspec, botocore's own errors from s3fs."""
    errors: tuple[type[BaseException], ...] = (OSError,)
    try:
        from botocore.exceptions import BotoCoreError
    except ImportError:
        return errors
    return (*errors, BotoCoreError)


def is_unreachable(exc: BaseException) -> bool:
    """Whether a failure is the endpoint not answering (refused, timed out, dropped), rather
    than an answer that says no."""
    if isinstance(exc, (ConnectionError, TimeoutError)) or "NETWORK_CONNECTION" in str(exc):
        return True
    try:
        from botocore.exceptions import ConnectionError as BotoConnectionError
        from botocore.exceptions import HTTPClientError
    except ImportError:
        return False
    return isinstance(exc, (BotoConnectionError, HTTPClientError))
