"""WebDataset tars and Parquet files read by URL, from a real S3 server on loopback (moto,
tests/s3server.py): a brace range, a glob or a prefix of tars, a prefix of Parquet files, each
converted (and uploaded to s3://) to the bytes their local copies give."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from tests.conftest import convert
from tests.preprocess.sample_files import (
    photo_rows,
    photo_samples,
    write_hf_parquet,
    write_tar,
    write_tars,
)
from tests.s3server import get_object, list_keys, put_object

ARGS = ("--short-side", "32", "--shard-size", "12KB", "--workers", "2")


def _upload(folder: Path, url: str) -> None:
    for path in sorted(folder.iterdir()):
        put_object(f"{url}/{path.name}", path.read_bytes())


def _same_as_local(local: Path, url: str) -> None:
    names = sorted(p.name for p in local.iterdir() if not p.name.startswith("."))
    assert list_keys(url) == names
    for name in names:
        assert get_object(f"{url}/{name}") == (local / name).read_bytes(), name


@pytest.fixture
def tars(tmp_path: Path, s3_bucket: str) -> tuple[Path, str]:
    """Three tars and one cut short, here and under s3://BUCKET/wds."""
    folder = tmp_path / "wds"
    write_tars(folder, count=3, per_tar=6)
    whole = write_tar(tmp_path / "whole.tar", photo_samples(4, first=18))
    with tarfile.open(whole) as tar:
        cut = tar.getmember("000019.jpg").offset_data + 100
    (folder / "shard-000003.tar").write_bytes(whole.read_bytes()[:cut])
    _upload(folder, f"{s3_bucket}/wds")
    return folder, f"{s3_bucket}/wds"


@pytest.mark.parametrize("form", ["shard-{000000..000003}.tar", "*.tar", ""])
def test_tars_by_url_convert_to_the_bytes_of_their_local_copies(cli, tmp_path: Path,
                                                                s3_bucket: str, tars, form: str
                                                                ) -> None:
    folder, url = tars
    convert("images", folder, tmp_path / "local", *ARGS)
    rejects = [json.loads(line) for line in
               (tmp_path / "local" / "rejects.jsonl").read_text().splitlines()]
    assert [r["source"] for r in rejects] == ["shard-000003.tar:000019"]
    assert rejects[0]["reason"].startswith("cut short at byte ")
    out = f"{s3_bucket}/converted"
    result = cli("convert", "images", f"{url}/{form}", out, *ARGS)
    assert result.code == 0, result.err
    _same_as_local(tmp_path / "local", out)


def test_parquet_by_url_converts_to_the_bytes_of_its_local_copy(cli, tmp_path: Path,
                                                               s3_bucket: str) -> None:
    folder = tmp_path / "hf"
    for n in range(2):
        rows = photo_rows(15, first=15 * n)
        write_hf_parquet(folder / f"train-{n:05d}-of-00002.parquet", rows["images"],
                         row_group_size=4, label=rows["label"], caption=rows["caption"])
    _upload(folder, f"{s3_bucket}/hf")
    convert("images", folder, tmp_path / "local", *ARGS)
    out = f"{s3_bucket}/converted"
    result = cli("convert", "images", f"{s3_bucket}/hf/train-*.parquet", out, *ARGS)
    assert result.code == 0, result.err
    _same_as_local(tmp_path / "local", out)


def test_a_url_that_names_nothing_is_one_line(cli, tmp_path: Path, s3_bucket: str,
                                              tars) -> None:
    _, url = tars
    for src, message in ((f"{url}/nothing-*.tar", "matches no .tar files"),
                         (f"{url}/shard-{{000003..000004}}.tar", "matches no .tar files"),
                         (f"{s3_bucket}/empty/", "matches no .tar/.parquet files")):
        result = cli("convert", "images", src, tmp_path / "out")
        assert result.code == 2, result.err
        assert message in result.err and result.err.count("\n") == 1
