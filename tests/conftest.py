from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from datapipe.cli import main
from tests.imagegen import make_image_folder
from tests.s3server import moto_server, new_bucket, point_aws_at


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    """Run the `datapipe` CLI in-process; returns exit code and captured output."""

    def run(*args: object) -> CliResult:
        capsys.readouterr()
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


def run_cli_process(*args: object, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the CLI as a real process (for kills, signals, tracebacks)."""
    return subprocess.run([sys.executable, "-m", "datapipe.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def image_folder(tmp_path: Path) -> Path:
    return make_image_folder(tmp_path / "src", classes=3, per_class=5)


def convert(kind: str, *args: object) -> None:
    """Run `datapipe convert KIND ARGS` in-process; fails the test on a non-zero exit."""
    try:
        main(["convert", kind, *map(str, args)])
    except SystemExit as exc:
        assert not exc.code, f"datapipe convert {kind} exited with {exc.code}"


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory):
    """A moto S3 server on 127.0.0.1 for the session, with AWS_* pointing at it."""
    with moto_server() as endpoint:
        env = point_aws_at(endpoint, tmp_path_factory.mktemp("aws"))
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield endpoint
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


@pytest.fixture
def s3_bucket(s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new, empty bucket as s3://NAME; the shard cache is the test's own (tmp_path/cache)."""
    monkeypatch.setenv("DATAPIPE_CACHE_DIR", str(tmp_path / "cache"))
    return f"s3://{new_bucket()}"
