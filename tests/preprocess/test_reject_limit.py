"""An exit status that means what it says: a conversion that converted nothing fails, and so
does one past `--max-rejects`, after writing what it could, as a conversion a rerun finishes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from datapipe.errors import ArgumentError
from preprocess.reject_limit import RejectLimit, reject_share
from tests.imagegen import make_image_folder
from tests.s3server import list_keys

JOURNAL = ".datapipe-convert.jsonl"


def _folder_with_rejects(root: Path, good: int = 12, bad: int = 2) -> Path:
    src = make_image_folder(root, classes=1, per_class=good, size=(96, 64))
    for i in range(bad):
        (src / "class_0" / f"zz_notes_{i}.txt").write_text("not an image\n")
    return src


def _rejected(out: Path) -> int:
    return len((out / "rejects.jsonl").read_text().splitlines())


def test_a_run_that_converts_nothing_fails_naming_its_rejects(cli, tmp_path: Path) -> None:
    """Once exit 0: "converted 0 images ... 34 images/s"."""
    src = make_image_folder(tmp_path / "src", classes=1, per_class=1)
    for path in src.rglob("*.jpg"):
        path.write_text("not an image\n")
    (src / "class_0" / "notes.txt").write_text("nor this\n")
    out = tmp_path / "out"
    result = cli("convert", "images", src, out)
    assert result.code == 1
    assert result.err == f"datapipe: error: 0 of 2 inputs converted, see {out}/rejects.jsonl\n"
    assert _rejected(out) == 2
    assert not (out / "manifest.json").exists()


def test_a_text_run_that_converts_nothing_fails(cli, tmp_path: Path) -> None:
    (tmp_path / "blank.txt").write_text("\n  \n")
    (tmp_path / "empty.txt").write_text("")
    out = tmp_path / "out"
    blank = cli("convert", "text", tmp_path / "blank.txt", out, "--tokenizer", "bytes")
    assert blank.code == 1
    assert blank.err == f"datapipe: error: 0 of 2 inputs converted, see {out}/rejects.jsonl\n"
    empty = cli("convert", "text", tmp_path / "empty.txt", tmp_path / "out2", "--tokenizer",
                "bytes")
    assert empty.code == 1
    assert empty.err == "datapipe: error: 0 inputs: the sources hold nothing to convert\n"


def test_past_max_rejects_the_run_fails_and_a_higher_limit_finishes_it(cli,
                                                                       tmp_path: Path) -> None:
    src = _folder_with_rejects(tmp_path / "src")
    args = ["--workers", 1, "--shard-size", "8KB"]
    assert cli("convert", "images", src, tmp_path / "clean", *args).code == 0
    out = tmp_path / "out"
    over = cli("convert", "images", src, out, *args, "--max-rejects", 1)
    assert over.code == 1
    assert over.err == (f"datapipe: error: 2 of 14 inputs rejected (14.3 %), more than "
                        f"--max-rejects 1 allows; see {out}/rejects.jsonl. The 12 samples made "
                        "are kept: the same command with a higher limit finishes the dataset\n")
    assert _rejected(out) == 2
    assert not (out / "manifest.json").exists() and (out / JOURNAL).exists()
    finished = cli("convert", "images", src, out, *args, "--max-rejects", 2)
    assert finished.code == 0, finished.err
    assert "converted 12 images of 14 inputs (2 rejected, 14.3 %)" in finished.out
    assert "kept from the interrupted run" in finished.out
    names = sorted(p.name for p in (tmp_path / "clean").iterdir())
    assert sorted(p.name for p in out.iterdir()) == names
    for name in names:
        assert (out / name).read_bytes() == (tmp_path / "clean" / name).read_bytes(), name


@pytest.mark.parametrize("limit, code", [("0.1", 1), ("0.15", 0), ("0", 1), ("2", 0)])
def test_max_rejects_as_a_count_or_a_fraction_of_the_inputs(cli, tmp_path: Path, limit: str,
                                                            code: int) -> None:
    src = _folder_with_rejects(tmp_path / "src")  # 2 of 14 rejected: 14.3 %
    result = cli("convert", "images", src, tmp_path / "out", "--max-rejects", limit)
    assert result.code == code, result.err
    assert (tmp_path / "out" / "manifest.json").exists() == (code == 0)


def test_max_rejects_applies_to_text(cli, tmp_path: Path) -> None:
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(8))
                      + "{broken\n")
    over = cli("convert", "text", corpus, tmp_path / "out", "--tokenizer", "bytes",
               "--max-rejects", "0")
    assert over.code == 1 and "1 of 9 inputs rejected (11.1 %)" in over.err
    ok = cli("convert", "text", corpus, tmp_path / "out", "--tokenizer", "bytes",
             "--max-rejects", "0.2")
    assert ok.code == 0, ok.err
    assert "converted 8 documents of 9 inputs (1 rejected, 11.1 %)" in ok.out


def test_the_summary_states_the_reject_share_even_when_none(cli, tmp_path: Path) -> None:
    src = make_image_folder(tmp_path / "src", classes=1, per_class=2)
    result = cli("convert", "images", src, tmp_path / "out")
    assert result.code == 0, result.err
    assert result.out.startswith("converted 2 images of 2 inputs (0 rejected, 0 %) into 1 ")


@pytest.mark.parametrize("value", ["-1", "1.0", "1.5", "many", "nan", "inf"])
def test_a_max_rejects_that_is_neither_count_nor_fraction_is_one_line(cli, tmp_path: Path,
                                                                      value: str) -> None:
    src = make_image_folder(tmp_path / "src", classes=1, per_class=1)
    result = cli("convert", "images", src, tmp_path / "out", f"--max-rejects={value}")
    assert result.code == 2
    assert result.err.startswith("datapipe: error: --max-rejects: ")
    assert len(result.err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_reject_limit_and_share() -> None:
    assert RejectLimit.parse("25") == RejectLimit(count=25)
    assert RejectLimit.parse("0.01") == RejectLimit(fraction=0.01)
    assert RejectLimit(count=2).exceeded(3, 100) and not RejectLimit(count=2).exceeded(2, 3)
    assert not RejectLimit(fraction=0.29).exceeded(29, 100)  # 0.29 * 100 is 28.999...
    assert RejectLimit(fraction=0.29).exceeded(30, 100)
    for bad in ({"count": True}, {"count": 1.0}, {}, {"count": 1, "fraction": 0.5},
                {"fraction": 1}):
        with pytest.raises(ArgumentError):
            RejectLimit(**bad)
    assert reject_share(2, 2000) == "0.1 %"
    assert reject_share(1, 3_000_000) == "< 0.1 %"
    assert reject_share(1, 2) == "50.0 %"
    assert reject_share(9999, 10_000) == "> 99.9 %" and reject_share(3, 3) == "100.0 %"
    assert reject_share(0, 0) == "0 %"


def test_a_url_out_past_max_rejects_gets_nothing_until_a_rerun_finishes(cli, tmp_path: Path,
                                                                        s3_bucket: str) -> None:
    src = _folder_with_rejects(tmp_path / "src", good=4, bad=1)
    url = f"{s3_bucket}/converted"
    over = cli("convert", "images", src, url, "--max-rejects", 0)
    assert over.code == 1 and "1 of 5 inputs rejected (20.0 %)" in over.err
    assert list_keys(url) == []  # the staging folder keeps the work, journalled
    finished = cli("convert", "images", src, url, "--max-rejects", 1)
    assert finished.code == 0, finished.err
    assert "kept from the interrupted run" in finished.out
    assert list_keys(url) == ["manifest.json", "rejects.jsonl", "shard-00000.arrow"]
