"""CSV and JSONL lists of images as people save them: a byte-order mark, rows of the wrong
width, labels too big for int64; every problem names the list and the line it is on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from datapipe.format import Dataset
from tests.imagegen import make_image_folder


def _photos(tmp_path: Path, count: int = 3) -> list[str]:
    src = make_image_folder(tmp_path / "imgs", classes=1, per_class=count)
    return [str(p.relative_to(tmp_path)) for p in sorted(src.rglob("*.jpg"))]


def _rejects(out: Path) -> dict[str, str]:
    lines = (out / "rejects.jsonl").read_text().splitlines()
    return {r["source"]: r["reason"] for r in map(json.loads, lines)}


@pytest.mark.parametrize("name", ["list.csv", "list.jsonl"])
def test_a_list_saved_with_a_byte_order_mark_is_read(cli, tmp_path: Path, name: str) -> None:
    """As Excel saves a CSV ("CSV UTF-8"): once refused as needing a 'path' column."""
    photos = _photos(tmp_path)
    if name.endswith(".csv"):
        text = "path,label\n" + "".join(f"{p},{i}\n" for i, p in enumerate(photos))
    else:
        text = "".join(json.dumps({"path": p, "label": i}) + "\n" for i, p in enumerate(photos))
    (tmp_path / name).write_bytes(b"\xef\xbb\xbf" + text.encode())
    result = cli("convert", "images", tmp_path / name, tmp_path / "out")
    assert result.code == 0, result.err
    with Dataset(tmp_path / "out") as ds:
        assert [ds[i]["label"] for i in range(len(ds))] == [0, 1, 2]
        assert ds.manifest.stats == {"inputs": 3, "rejected": 0}


def test_a_missing_label_is_named_by_its_line(cli, tmp_path: Path) -> None:
    """Once reported as "row 1": its index among the rows, from 0."""
    photos = _photos(tmp_path)
    (tmp_path / "list.csv").write_text(f"path,label\n{photos[0]},0\n{photos[1]},\n"
                                       f"{photos[2]},1\n")
    result = cli("convert", "images", tmp_path / "list.csv", tmp_path / "out")
    assert result.code == 1
    assert result.err.strip() == (f"datapipe: error: {tmp_path / 'list.csv'} line 3: no label, "
                                  "while other lines have one")


def test_line_numbers_count_blank_lines_and_quoted_line_breaks(cli, tmp_path: Path) -> None:
    photos = _photos(tmp_path)
    (tmp_path / "list.csv").write_text(
        f'path,label,caption\n\n{photos[0]},0,"two\nlines"\n{photos[1]},1\n{photos[2]},,\n')
    result = cli("convert", "images", tmp_path / "list.csv", tmp_path / "out")
    assert result.code == 1
    assert f"{tmp_path / 'list.csv'} line 6: no label" in result.err


def test_a_row_of_the_wrong_width_is_a_reject_naming_its_line(cli, tmp_path: Path) -> None:
    """An extra field once became a column named None ("column name must be a non-empty
    string, got None"), stopping the run."""
    photos = _photos(tmp_path)
    (tmp_path / "list.csv").write_text(f"path,label\n{photos[0]},0,extra\n{photos[1]},1\n"
                                       f"{photos[2]}\n")
    result = cli("convert", "images", tmp_path / "list.csv", tmp_path / "out")
    assert result.code == 0, result.err
    assert _rejects(tmp_path / "out") == {
        "list.csv:2": "list.csv line 2: 3 fields, the header has 2",
        "list.csv:4": "list.csv line 4: 1 field, the header has 2"}
    with Dataset(tmp_path / "out") as ds:
        assert [ds[i]["path"] for i in range(len(ds))] == [photos[1]]


@pytest.mark.parametrize("header, problem", [
    ("path,label,", "column 3 of the header has no name"),
    ("path,label,path", "the header names 'path' twice")])
def test_a_header_without_a_name_or_with_one_twice_is_one_line(cli, tmp_path: Path,
                                                              header: str, problem: str) -> None:
    photos = _photos(tmp_path, 1)
    (tmp_path / "list.csv").write_text(f"{header}\n{photos[0]},0,x\n")
    result = cli("convert", "images", tmp_path / "list.csv", tmp_path / "out")
    assert result.code == 2
    assert result.err.strip() == f"datapipe: error: SRC {tmp_path / 'list.csv'} line 1: {problem}"


@pytest.mark.parametrize("name", ["list.csv", "list.jsonl"])
def test_a_label_beyond_int64_is_a_reject_and_out_is_a_dataset(cli, tmp_path: Path,
                                                              name: str) -> None:
    """Once a pyarrow OverflowError traceback after all the work, leaving a .tmp shard and a
    journal that every rerun failed on again."""
    photos = _photos(tmp_path)
    labels = [0, 99999999999999999999, -(1 << 63)]
    if name.endswith(".csv"):
        text = "path,label\n" + "".join(f"{p},{n}\n" for p, n in zip(photos, labels, strict=True))
    else:
        text = "".join(json.dumps({"path": p, "label": n}) + "\n"
                       for p, n in zip(photos, labels, strict=True))
    (tmp_path / name).write_text(text)
    result = cli("convert", "images", tmp_path / name, tmp_path / "out")
    assert result.code == 0, result.err
    line = 3 if name.endswith(".csv") else 2  # under the header, or the second record
    assert _rejects(tmp_path / "out") == {
        photos[1]: f"{name} line {line}: label 99999999999999999999 is beyond the int64 range"}
    with Dataset(tmp_path / "out") as ds:
        assert [ds[i]["label"] for i in range(len(ds))] == [0, -(1 << 63)]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "manifest.json", "rejects.jsonl", "shard-00000.arrow"]


def test_an_extra_column_of_integers_beyond_int64_keeps_its_digits(cli, tmp_path: Path) -> None:
    photos = _photos(tmp_path, 2)
    (tmp_path / "list.csv").write_text(f"path,label,id\n{photos[0]},0,7\n"
                                       f"{photos[1]},1,123456789012345678901234567890\n")
    result = cli("convert", "images", tmp_path / "list.csv", tmp_path / "out")
    assert result.code == 0, result.err
    with Dataset(tmp_path / "out") as ds:
        assert ds.manifest.column("id").type == "string"
        assert [ds[i]["id"] for i in range(2)] == ["7", "123456789012345678901234567890"]


def test_jsonl_lines_are_numbered_as_a_file_reader_numbers_them(cli, tmp_path: Path) -> None:
    """A JSON string may hold U+2028 or U+0085 as it is; str.splitlines cut the record there
    and numbered every later line wrongly."""
    photos = _photos(tmp_path, 2)
    lines = [json.dumps({"path": photos[0], "label": 0, "note": "a\u2028b\x85c"},
                        ensure_ascii=False), "{broken", json.dumps({"path": photos[1], "label": 1})]
    (tmp_path / "list.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = cli("convert", "images", tmp_path / "list.jsonl", tmp_path / "out")
    assert result.code == 0, result.err
    assert _rejects(tmp_path / "out") == {"list.jsonl:2": "list.jsonl line 2: not a JSON object"}
    with Dataset(tmp_path / "out") as ds:
        assert ds[0]["note"] == "a\u2028b\x85c"


def test_a_jsonl_list_record_may_hold_a_bare_carriage_return(cli, tmp_path: Path) -> None:
    """A bare \\r is JSON whitespace: ending a line there cut the record into two rejects."""
    photos = _photos(tmp_path, 2)
    lines = ['{"path":\r' + json.dumps(photos[0]) + ', "label": 0}',
             json.dumps({"path": photos[1], "label": 1})]
    (tmp_path / "list.jsonl").write_bytes(("\r\n".join(lines) + "\r\n").encode())
    result = cli("convert", "images", tmp_path / "list.jsonl", tmp_path / "out")
    assert result.code == 0, result.err
    assert not (tmp_path / "out/rejects.jsonl").read_text()
    with Dataset(tmp_path / "out") as ds:
        assert len(ds) == 2


def test_a_fractional_json_label_is_a_class_name_never_truncated(cli, tmp_path: Path) -> None:
    """int(1.5) is 1: a JSON label 1.5 once became class 1 silently."""
    photos = _photos(tmp_path)
    (tmp_path / "list.jsonl").write_text("".join(
        json.dumps({"path": p, "label": n}) + "\n" for p, n in zip(photos, [1, 1.5, 2.0],
                                                                   strict=True)))
    result = cli("convert", "images", tmp_path / "list.jsonl", tmp_path / "out")
    assert result.code == 0, result.err
    with Dataset(tmp_path / "out") as ds:
        assert ds.manifest.classes == ("1", "1.5", "2.0")
        assert [ds[i]["label"] for i in range(len(ds))] == [0, 1, 2]
