"""A conversion from WebDataset tars or Parquet files killed with SIGKILL mid-run resumes on
rerun to output byte-identical to an uninterrupted run, as one from a folder does."""

from __future__ import annotations

from pathlib import Path

import pytest

from datapipe.format import Dataset
from tests.integration.test_kill_resume import killed_and_resumed_matches_clean
from tests.preprocess.sample_files import photo_rows, photo_samples, write_hf_parquet, write_tar


def _tars(root: Path) -> str:
    for n in range(4):
        samples = photo_samples(60, first=n * 60, width=320, height=240)
        if n == 1:
            del samples[5]["jpg"]  # a reject, journalled with the shard it falls in
        write_tar(root / f"shard-{n:06d}.tar", samples)
    return f"{root}/shard-{{000000..000003}}.tar"


def _parquet(root: Path) -> str:
    for n in range(2):
        rows = photo_rows(120, first=n * 120, width=320, height=240)
        rows["images"][7] = None
        write_hf_parquet(root / f"train-{n}.parquet", rows["images"], row_group_size=50,
                         label=rows["label"], caption=rows["caption"])
    return str(root)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["tar", "parquet"])
def test_sigkill_then_rerun_resumes_to_identical_output(tmp_path: Path, kind: str) -> None:
    src = (_tars if kind == "tar" else _parquet)(tmp_path / "src")
    args = ["convert", "images", src, "OUT", "--short-side", "128", "--shard-size", "60KB",
            "--workers", "2"]
    out = killed_and_resumed_matches_clean(tmp_path, [str(a) for a in args])
    with Dataset(out) as ds:
        paths = [ds[i]["path"] for i in range(len(ds))]
    good = 240 - (1 if kind == "tar" else 2)
    assert len(paths) == len(set(paths)) == good  # every good input exactly once
