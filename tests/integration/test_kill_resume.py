"""A conversion killed with SIGKILL mid-run resumes on rerun: nothing lost, nothing doubled."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from datapipe.format import Dataset
from preprocess.resume import JOURNAL_NAME
from tests.conftest import run_cli_process
from tests.imagegen import make_image_folder, write_awkward_images


def _journal_shards(out: Path) -> int:
    journal = out / JOURNAL_NAME
    return max(0, len(journal.read_text().splitlines()) - 1) if journal.exists() else 0


def _kill_after_shards(args: list[str], out: Path, shards: int) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "datapipe.cli", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while _journal_shards(out) < shards:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"conversion ended before it could be killed: {proc.stderr.read()!r}")
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_sigkill_then_rerun_resumes_to_identical_output(tmp_path: Path, workers: int) -> None:
    src = make_image_folder(tmp_path / "src", classes=4, per_class=60, size=(320, 240))
    write_awkward_images(src / "class_1")
    args = ["convert", "images", str(src), "OUT", "--short-side", "128", "--shard-size", "60KB",
            "--workers", str(workers)]
    out = killed_and_resumed_matches_clean(tmp_path, args)
    verify = run_cli_process("verify", out)
    assert verify.returncode == 0, verify.stderr
    with Dataset(out) as ds:
        paths = [ds[i]["path"] for i in range(len(ds))]
    assert len(paths) == len(set(paths)) == 240 + 5  # every good input exactly once


def killed_and_resumed_matches_clean(tmp_path: Path, args: list[str]) -> Path:
    """Run `args` (OUT standing for the output) once whole, once SIGKILLed after three shards
    and rerun; the rerun keeps the journalled shards and its output is byte-identical to the
    uninterrupted run's (same shards, rejects and manifest). Returns the resumed OUT."""
    clean = tmp_path / "clean"
    assert run_cli_process(*[a.replace("OUT", str(clean)) for a in args]).returncode == 0
    out = tmp_path / "killed"
    killed_args = [a.replace("OUT", str(out)) for a in args]
    _kill_after_shards(killed_args, out, shards=3)
    assert not (out / "manifest.json").exists()
    kept = _journal_shards(out)
    rerun = run_cli_process(*killed_args)
    assert rerun.returncode == 0, rerun.stderr
    assert "kept from the interrupted run" in rerun.stdout
    assert kept >= 3
    assert not (out / JOURNAL_NAME).exists()
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in clean.iterdir())
    for path in clean.iterdir():
        assert (out / path.name).read_bytes() == path.read_bytes(), path.name
    return out


_TEXT_SUMMARY = re.compile(r"converted ([\d,]+) documents of .* s, ([\d,]+) tokens(?: \(([\d,]+) "
                           r"documents and ([\d,]+) tokens this run\))?, ")


def _summary_counts(stdout: str) -> list[int | None]:
    """(documents, tokens, this run's documents, this run's tokens) a text summary says."""
    found = _TEXT_SUMMARY.search(stdout)
    assert found, stdout
    return [int(n.replace(",", "")) if n else None for n in found.groups()]


@pytest.mark.slow
def test_a_resumed_text_run_says_the_dataset_s_documents_and_tokens(tmp_path: Path) -> None:
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": f"document {n} " * (1 + n % 9)}) + "\n"
                           for n in range(60_000)))
    args = ["convert", "text", str(src), "OUT", "--tokenizer", "bytes", "--append-eos",
            "--shard-size", "16KB", "--workers", "2"]
    clean = run_cli_process(*[a.replace("OUT", str(tmp_path / "clean")) for a in args])
    assert clean.returncode == 0, clean.stderr
    out = tmp_path / "killed"
    killed_args = [a.replace("OUT", str(out)) for a in args]
    _kill_after_shards(killed_args, out, shards=3)
    rerun = run_cli_process(*killed_args)
    assert rerun.returncode == 0, rerun.stderr
    assert "kept from the interrupted run" in rerun.stdout
    documents, tokens, run_documents, run_tokens = _summary_counts(rerun.stdout)
    with Dataset(out) as ds:
        assert documents == len(ds) == 60_000
        assert tokens == int(ds.scalar("length").sum())
    assert _summary_counts(clean.stdout) == [documents, tokens, None, None]
    assert 0 < run_documents < documents and 0 < run_tokens < tokens


def test_resume_with_other_settings_is_refused(tmp_path: Path) -> None:
    src = make_image_folder(tmp_path / "src", classes=2, per_class=60, size=(320, 240))
    out = tmp_path / "out"
    args = ["convert", "images", str(src), str(out), "--shard-size", "60KB", "--workers", "1"]
    _kill_after_shards(args, out, shards=1)
    result = run_cli_process(*args[:-2], "--quality", "50", "--workers", "1")
    assert result.returncode == 2
    assert "interrupted conversion" in result.stderr and "Traceback" not in result.stderr
