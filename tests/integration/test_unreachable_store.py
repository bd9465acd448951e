"""An object store that cannot be reached, or a library that is not installed: one line naming
the endpoint or the package, a non-zero exit, and never a hang. The stuck endpoint is a real
TCP server on loopback that accepts connections and never answers (as a stuck proxy does)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.s3server import point_aws_at

BACKENDS = ["arrow", "fsspec"]


@contextlib.contextmanager
def silent_server(seconds: float = 60) -> Iterator[str]:
    """An endpoint on 127.0.0.1 that accepts every connection and never sends a byte; it
    closes them all when the block ends, or by itself after `seconds`."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    stop = threading.Event()
    accepted: list[socket.socket] = []

    def accept() -> None:
        deadline = time.monotonic() + seconds
        while not stop.is_set() and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                accepted.append(server.accept()[0])
        for conn in accepted:
            conn.close()
        server.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)


def _datapipe(env: dict[str, str], *args: str, timeout: float = 90,
              prelude: str = "") -> tuple[subprocess.CompletedProcess, float]:
    """The CLI in a process of its own (`prelude` runs first); its result and seconds taken."""
    code = f"{prelude}\nfrom datapipe.cli import main\nmain({list(args)!r})"
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=timeout, env={**os.environ, **env})
    return result, time.monotonic() - started


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_endpoint_that_never_answers_is_an_error_naming_it(tmp_path: Path,
                                                              backend: str) -> None:
    with silent_server() as endpoint:
        env = {**point_aws_at(endpoint, tmp_path / "aws"), "DATAPIPE_REMOTE_BACKEND": backend,
               "DATAPIPE_REMOTE_CONNECT_TIMEOUT": "1", "DATAPIPE_REMOTE_READ_TIMEOUT": "1",
               "DATAPIPE_CACHE_DIR": str(tmp_path / "cache")}
        result, seconds = _datapipe(env, "inspect", "s3://bucket/dataset")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert "s3://bucket/dataset/manifest.json: cannot reach " + endpoint in result.stderr
    assert "DATAPIPE_REMOTE_READ_TIMEOUT" in result.stderr and "3 attempts" in result.stderr
    # 3 attempts of at most 1 + 1 s, plus the retries' backoff and the start-up.
    assert seconds < 30, seconds


def test_the_timeouts_must_be_seconds(tmp_path: Path) -> None:
    for value in ("soon", "0", "-1", "nan", "inf"):
        env = {"DATAPIPE_REMOTE_READ_TIMEOUT": value,
               "DATAPIPE_CACHE_DIR": str(tmp_path / "cache")}
        result, _ = _datapipe(env, "inspect", "s3://bucket/dataset", timeout=60)
        assert result.returncode == 2, result.stderr
        assert "DATAPIPE_REMOTE_READ_TIMEOUT" in result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


@pytest.mark.parametrize(("url", "package", "backend"), [
    ("gs://bucket/dataset", "gcsfs", "arrow"),
    ("az://container/dataset", "adlfs", "arrow"),
    ("abfs://container/dataset", "adlfs", "arrow"),
    ("s3://bucket/dataset", "s3fs", "fsspec"),
])
def test_a_protocol_without_its_library_names_the_package(tmp_path: Path, url: str,
                                                          package: str, backend: str) -> None:
    """The package is made impossible to import, whether or not it is installed here."""
    prelude = f"import sys\nsys.modules[{package!r}] = None"
    env = {"DATAPIPE_REMOTE_BACKEND": backend, "DATAPIPE_CACHE_DIR": str(tmp_path / "cache")}
    for command in ("inspect", "verify"):
        result, _ = _datapipe(env, command, url, prelude=prelude, timeout=60)
        assert result.returncode == 2, result.stderr
        assert f"needs {package} (pip install {package})" in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_missing_object_is_still_missing(s3_bucket: str, cli, monkeypatch: pytest.MonkeyPatch,
                                           backend: str) -> None:
    """Errors from the store are told apart: an answer that says 'no such key' is not an
    endpoint that does not answer."""
    monkeypatch.setenv("DATAPIPE_REMOTE_BACKEND", backend)
    result = cli("inspect", f"{s3_bucket}/nothing-here")
    assert result.code == 1 and result.err.count("\n") == 1
    assert f"{s3_bucket}/nothing-here/manifest.json: missing" in result.err, result.err
