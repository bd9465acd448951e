"""Conversion spread over workers: the writing process only orders and writes (workers read,
parse and tokenize their own spans of the inputs), and the output is byte-identical for any
number of workers, rejects and resume included."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from preprocess.image_ops import ImageSettings
from preprocess.images import convert_images
from preprocess.output import OutputOptions
from preprocess.resume import JOURNAL_NAME
from preprocess.text import convert_text
from preprocess.text_sources import TextOptions
from tests.conftest import run_cli_process
from tests.imagegen import make_image_folder, write_awkward_images
from tests.integration.test_kill_resume import _kill_after_shards

WORKERS = (1, 2, 3)


def _same_output(outs: list[Path]) -> None:
    names = sorted(p.name for p in outs[0].iterdir())
    for out in outs[1:]:
        assert sorted(p.name for p in out.iterdir()) == names
        for name in names:
            assert (out / name).read_bytes() == (outs[0] / name).read_bytes(), (out, name)


def _corpus(root: Path) -> tuple[list[Path], dict[str, str]]:
    """JSONL with bad lines spread through it (some blank, some CRLF), a .txt with empty lines,
    Parquet of many row groups with nulls; and the rejects expected, by source."""
    rng, lines, expected = random.Random(3), [], {}
    jsonl = root / "a.jsonl"
    for number in range(1, 6001):
        roll = rng.random()
        if roll < 0.01:
            lines.append('{"text": "cut')
            expected[f"{jsonl}:{number}"] = f"a.jsonl line {number}: not valid JSON"
        elif roll < 0.02:
            lines.append("")  # blank: not a document, but it counts as a line
        elif roll < 0.03:
            lines.append('{"text": null}')
            expected[f"{jsonl}:{number}"] = f"a.jsonl line {number}: field 'text' is null"
        else:
            lines.append(json.dumps({"text": f"document {number} " * rng.randint(1, 12)}))
    jsonl.write_bytes(("\r\n".join(lines[:3000]) + "\n" + "\n".join(lines[3000:]) + "\n")
                      .encode())
    text = root / "b.txt"
    words = [f"line {n}" if n % 97 else "" for n in range(1, 4001)]
    text.write_text("\n".join(words) + "\n")
    expected.update({f"{text}:{n}": "empty document" for n in range(97, 4001, 97)})
    parquet = root / "c.parquet"
    rows = [None if n % 501 == 7 else f"row {n} " * (n % 9 + 1) for n in range(5000)]
    pq.write_table(pa.table({"text": rows}), parquet, row_group_size=300)
    expected.update({f"{parquet}#row{n}": f"c.parquet row {n}: null text"
                     for n in range(7, 5000, 501)})
    return [jsonl, text, parquet], expected


def _convert_text(files: list[Path], out: Path, workers: int, shard_size: int = 16 << 10
                  ) -> object:
    return convert_text(files, OutputOptions(out, shard_size=shard_size), "bytes", TextOptions(),
                        append_eos=True, workers=workers)


def test_text_is_byte_identical_for_any_number_of_workers_with_exact_rejects(
        tmp_path: Path) -> None:
    files, expected = _corpus(tmp_path)
    outs = [tmp_path / f"out{w}" for w in WORKERS]
    for workers, out in zip(WORKERS, outs, strict=True):
        result = _convert_text(files, out, workers)
        assert len(result.manifest.shards) > 10
    _same_output(outs)
    rejects = [json.loads(line) for line in (outs[0] / "rejects.jsonl").read_text().splitlines()]
    assert [r["source"] for r in rejects] == list(expected)
    for reject in rejects:
        assert reject["reason"].startswith(expected[reject["source"]]), reject


def _forbid_in_this_process(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> None:
    """Calling owner.name in this process fails the test; forked workers may call it."""
    real, here = getattr(owner, name), os.getpid()

    def guarded(*args: object, **kwargs: object) -> object:
        if os.getpid() == here:
            raise AssertionError(f"{name} called in the writing process")
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, guarded)


def test_the_writing_process_parses_no_json_and_reads_no_parquet_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files, _ = _corpus(tmp_path)
    _convert_text(files, tmp_path / "before", workers=2)
    _forbid_in_this_process(monkeypatch, json, "loads")
    for method in ("read_row_groups", "iter_batches", "read", "read_row_group"):
        _forbid_in_this_process(monkeypatch, pq.ParquetFile, method)
    _convert_text(files, tmp_path / "after", workers=2)
    _same_output([tmp_path / "before", tmp_path / "after"])


def test_images_are_byte_identical_for_any_number_of_workers_and_not_sized_by_the_writer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import preprocess.output

    src = make_image_folder(tmp_path / "src", classes=3, per_class=12, size=(160, 120))
    write_awkward_images(src / "class_1")
    # Each image's stored size comes with it from its worker: the writing process only
    # hands samples on.
    _forbid_in_this_process(monkeypatch, preprocess.output, "rows_nbytes")
    outs = [tmp_path / f"out{w}" for w in WORKERS]
    for workers, out in zip(WORKERS, outs, strict=True):
        options = OutputOptions(out, shard_size=20 << 10)
        result = convert_images(src, options, ImageSettings(short_side=64), workers)
        assert len(result.manifest.shards) > 3 and result.rejects
    _same_output(outs)


@pytest.mark.slow
def test_killed_text_run_resumes_from_a_span_to_identical_output(tmp_path: Path) -> None:
    files, _ = _corpus(tmp_path)
    big = tmp_path / "big.jsonl"  # long enough to be killed mid-run
    big.write_bytes(files[0].read_bytes() * 6)
    args = ["convert", "text", str(big), "OUT", "--tokenizer", "bytes", "--shard-size", "64KB",
            "--workers", "2"]
    clean = tmp_path / "clean"
    assert run_cli_process(*[a.replace("OUT", str(clean)) for a in args]).returncode == 0
    out = tmp_path / "killed"
    killed = [a.replace("OUT", str(out)) for a in args]
    _kill_after_shards(killed, out, shards=12)  # past the first span
    entries = [json.loads(line) for line in (out / JOURNAL_NAME).read_text().splitlines()[1:]]
    point = entries[-1]["resume"]  # where the rerun starts reading, not at byte 0
    assert 0 < point["offset"] < big.stat().st_size and point["input"] > 0
    assert point["input"] <= entries[-1]["inputs_done"]
    rerun = run_cli_process(*killed)
    assert rerun.returncode == 0, rerun.stderr
    assert "kept from the interrupted run" in rerun.stdout
    _same_output([clean, out])
