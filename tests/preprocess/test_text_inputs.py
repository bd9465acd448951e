"""What `convert text` does with bad records and bad files: a bad line or a null is a reject
naming file and line (the run goes on); a file that cannot be read as text is one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datapipe.format import Dataset
from tests.conftest import run_cli_process


def _rejects(out: Path) -> dict[str, str]:
    lines = (out / "rejects.jsonl").read_text().splitlines()
    return {r["source"]: r["reason"] for r in map(json.loads, lines)}


def _texts(out: Path) -> list[str]:
    with Dataset(out) as ds:
        return [bytes(ds[i]["tokens"].tolist()).decode() for i in range(len(ds))]


def _jsonl_with_bad_lines(path: Path) -> Path:
    lines = ['{"text": "first"}', '{"text": "second", ', '["a", "list"]', '{"text": null}',
             '{"text": 42}', '{"body": "no text field"}', "", '{"text": "last"}']
    path.write_text("\n".join(lines) + "\n")
    return path


def test_bad_jsonl_lines_and_nulls_are_rejects_naming_file_and_line(cli, tmp_path: Path) -> None:
    src = _jsonl_with_bad_lines(tmp_path / "docs.jsonl")
    result = cli("convert", "text", src, tmp_path / "out", "--tokenizer", "bytes")
    assert result.code == 0, result.err
    assert "rejected 5 inputs" in result.out
    assert _texts(tmp_path / "out") == ["first", "last"]
    rejects = _rejects(tmp_path / "out")
    assert list(rejects) == [f"{src}:{n}" for n in (2, 3, 4, 5, 6)]
    expected = ["line 2: not valid JSON", "line 3: not a JSON object but an array",
                "line 4: field 'text' is null, not a string",
                "line 5: field 'text' is a number, not a string", "line 6: no field 'text'"]
    for reason, words in zip(rejects.values(), expected, strict=True):
        assert reason.startswith(f"docs.jsonl {words}"), reason
    with Dataset(tmp_path / "out") as ds:
        assert ds.manifest.stats == {"inputs": 7, "rejected": 5}


def test_strict_stops_at_the_first_bad_jsonl_line(cli, tmp_path: Path) -> None:
    src = _jsonl_with_bad_lines(tmp_path / "docs.jsonl")
    result = cli("convert", "text", src, tmp_path / "out", "--tokenizer", "bytes", "--strict")
    assert result.code == 1
    assert f"{src}:2: docs.jsonl line 2: not valid JSON" in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_parquet_nulls_are_rejects_and_a_column_of_numbers_is_one_line(tmp_path: Path) -> None:
    pq.write_table(pa.table({"text": ["one", None, "three"]}), tmp_path / "nulls.parquet")
    ok = run_cli_process("convert", "text", tmp_path / "nulls.parquet", tmp_path / "out",
                         "--tokenizer", "bytes")
    assert ok.returncode == 0, ok.stderr
    assert _rejects(tmp_path / "out") == {
        f"{tmp_path / 'nulls.parquet'}#row1": "nulls.parquet row 1: null text"}

    pq.write_table(pa.table({"text": [1, 2, 3]}), tmp_path / "numbers.parquet")
    bad = run_cli_process("convert", "text", tmp_path / "numbers.parquet", tmp_path / "out2",
                          "--tokenizer", "bytes")
    assert bad.returncode == 1
    assert bad.stderr.strip() == (f"datapipe: error: {tmp_path / 'numbers.parquet'}: column "
                                  "'text' holds int64, not text (choose the text column with "
                                  "--field)")


def test_text_files_that_cannot_be_read_are_one_line_not_a_traceback_or_a_hang(
        tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    (corpus / "chapter.txt").mkdir(parents=True)  # a folder named like a text file
    (corpus / "chapter.txt" / "part.txt").write_text("inside the folder\n")
    ok = run_cli_process("convert", "text", corpus, tmp_path / "out", "--tokenizer", "bytes",
                         timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert _texts(tmp_path / "out") == ["inside the folder"]
    for name, make in (("gone.txt", lambda p: p.symlink_to(tmp_path / "nowhere.txt")),
                       ("pipe.txt", os.mkfifo)):
        make(corpus / name)
        bad = run_cli_process("convert", "text", corpus, tmp_path / name, "--tokenizer",
                              "bytes", timeout=60)
        assert bad.returncode == 1, bad.stderr
        assert bad.stderr.strip() == (f"datapipe: error: {corpus / name}: not a regular file "
                                      "(or a link to none)")
        (corpus / name).unlink()


def test_out_inside_a_folder_of_text_is_left_out_of_it(cli, tmp_path: Path) -> None:
    """A rerun with --overwrite once read OUT/rejects.jsonl as a corpus (and stopped: its
    first record has no 'text')."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "docs.jsonl").write_text('{"text": "kept"}\n{"text": ""}\n')
    first = cli("convert", "text", corpus, corpus / "out", "--tokenizer", "bytes")
    assert first.code == 0, first.err
    again = cli("convert", "text", corpus, corpus / "out", "--tokenizer", "bytes", "--overwrite")
    assert again.code == 0, again.err
    assert _texts(corpus / "out") == ["kept"]
    with Dataset(corpus / "out") as ds:
        assert ds.manifest.stats == {"inputs": 2, "rejected": 1}


def test_jsonl_lines_are_numbered_as_a_file_reader_numbers_them(cli, tmp_path: Path) -> None:
    """JSON strings may hold U+2028 and U+0085 as they are; str.splitlines cut such a record
    in two rejects and numbered every later line wrongly."""
    src = tmp_path / "docs.jsonl"
    lines = [json.dumps({"text": "one\u2028line\x85still"}, ensure_ascii=False), "{broken",
             json.dumps({"text": "last"})]
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = cli("convert", "text", src, tmp_path / "out", "--tokenizer", "bytes")
    assert result.code == 0, result.err
    assert _texts(tmp_path / "out") == ["one\u2028line\x85still", "last"]
    assert list(_rejects(tmp_path / "out")) == [f"{src}:2"]


def test_a_byte_order_mark_is_not_part_of_the_first_document(cli, tmp_path: Path) -> None:
    (tmp_path / "docs.jsonl").write_bytes(b"\xef\xbb\xbf" + b'{"text": "first"}\n')
    (tmp_path / "lines.txt").write_bytes(b"\xef\xbb\xbfone\ntwo\n")
    result = cli("convert", "text", tmp_path / "docs.jsonl", tmp_path / "lines.txt",
                 tmp_path / "out", "--tokenizer", "bytes")
    assert result.code == 0, result.err
    assert _texts(tmp_path / "out") == ["first", "one", "two"]


def test_a_run_stopped_as_an_absolute_path_resumes_as_a_relative_one(
        cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once refused as "an interrupted conversion with other inputs"."""
    lines = [json.dumps({"text": f"document number {i}"}) for i in range(2000)] + ["{broken"]
    (tmp_path / "big.jsonl").write_text("\n".join(lines) + "\n")
    args = ["--tokenizer", "bytes", "--shard-size", "8KB", "--workers", 1]
    stopped = cli("convert", "text", tmp_path / "big.jsonl", tmp_path / "out", *args, "--strict")
    assert stopped.code == 1 and "line 2001" in stopped.err
    monkeypatch.chdir(tmp_path)
    resumed = cli("convert", "text", "big.jsonl", "out", *args)
    assert resumed.code == 0, resumed.err
    assert "kept from the interrupted run" in resumed.out
    assert len(_texts(tmp_path / "out")) == 2000


def test_jsonl_lines_end_only_at_a_newline(cli, tmp_path: Path) -> None:
    """Four valid records: three hold U+2028, U+2029 and U+0085 raw in their strings, the
    fourth a bare \\r between its values (JSON whitespace), and one line ends \\r\\n. A line
    end anywhere but at \\n cut a record into "not valid JSON" rejects."""
    texts = ["web\u2028text", "para\u2029graph", "next\x85line", "all\u2028three\u2029\x85"]
    lines = [json.dumps({"text": t}, ensure_ascii=False) for t in texts[:3]]
    lines.append('{"id": 4,\r"text":\r' + json.dumps(texts[3], ensure_ascii=False) + "}")
    src = tmp_path / "docs.jsonl"
    src.write_bytes(("\n".join(lines[:2]) + "\r\n" + "\n".join(lines[2:]) + "\n").encode())
    result = cli("convert", "text", src, tmp_path / "out", "--tokenizer", "bytes")
    assert result.code == 0, result.err
    assert "converted 4 documents of 4 inputs (0 rejected" in result.out
    assert _texts(tmp_path / "out") == texts
