"""A real S3-compatible server on loopback for the tests: moto's server mode, in its own process.

The session starts one server on a free port of 127.0.0.1 and points the standard AWS_*
variables at it (subprocesses inherit them); each test gets a bucket of its own.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
           "AWS_EC2_METADATA_DISABLED": "true"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError("moto server did not start listening")


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """Run `python -m moto.server` on 127.0.0.1; yields its endpoint URL."""
    pytest.importorskip("moto.server")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def point_aws_at(endpoint: str, config_dir: Path) -> dict[str, str]:
    """The environment that sends every S3 client to `endpoint`, whatever ~/.aws holds."""
    config_dir.mkdir(parents=True, exist_ok=True)
    return {**AWS_ENV, "AWS_ENDPOINT_URL": endpoint,
            "AWS_CONFIG_FILE": str(config_dir / "config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(config_dir / "credentials")}


def new_bucket() -> str:
    import boto3

    name = f"datapipe-test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name


def upload_directory(directory: Path, url: str) -> None:
    """Copy a local dataset directory to s3://bucket/prefix with boto3 (not datapipe's code)."""
    import boto3

    bucket, _, prefix = url[len("s3://"):].partition("/")
    client = boto3.client("s3")
    for path in sorted(directory.iterdir()):
        if path.is_file() and not path.name.startswith(".datapipe-"):
            client.upload_file(str(path), bucket, f"{prefix}/{path.name}".lstrip("/"))


def put_object(url: str, data: bytes) -> None:
    import boto3

    bucket, _, key = url[len("s3://"):].partition("/")
    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=data)


def get_object(url: str) -> bytes:
    import boto3

    bucket, _, key = url[len("s3://"):].partition("/")
    return boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()


def list_keys(url: str) -> list[str]:
    import boto3

    bucket, _, prefix = url[len("s3://"):].partition("/")
    pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=prefix.rstrip("/") + "/")
    return sorted(o["Key"].rsplit("/", 1)[-1] for page in pages for o in page.get("Contents", []))


