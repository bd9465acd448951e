"""WebDataset tar shards as the input of `datapipe convert images`: named as WebDataset names
them (a tar, a folder, a glob, a brace range, '::'), samples grouped by key in tar order, the
label and extra columns from their members, and every broken sample a reject naming its tar
and key. Workers list the tars and read the images; the writing process reads neither."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from datapipe.format import Dataset
from preprocess.image_ops import ImageSettings
from preprocess.images import convert_images
from preprocess.output import OutputOptions
from tests.conftest import run_cli_process
from tests.preprocess.sample_files import (
    add_member,
    photo,
    photo_samples,
    write_tar,
    write_tars,
)


def _rejects(out: Path) -> dict[str, str]:
    lines = (out / "rejects.jsonl").read_text().splitlines()
    return {r["source"]: r["reason"] for r in map(json.loads, lines)}


def _rows(out: Path) -> list[dict]:
    with Dataset(out) as ds:
        return [{k: v for k, v in ds[i].items() if k != "image"} for i in range(len(ds))]


def _same_files(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.fixture
def shards(tmp_path: Path) -> Path:
    write_tars(tmp_path / "shards", count=3, per_tar=4)
    return tmp_path / "shards"


def test_samples_are_grouped_by_key_in_tar_order_with_label_and_extras(cli, shards: Path,
                                                                       tmp_path: Path) -> None:
    result = cli("convert", "images", shards / "shard-{000000..000002}.tar", tmp_path / "out",
                 "--short-side", 32, "--workers", 2)
    assert result.code == 0, result.err
    assert "converted 12 images of 12 inputs" in result.out
    rows = _rows(tmp_path / "out")
    assert [r["path"] for r in rows] == [f"shard-{n // 4:06d}.tar:{n:06d}" for n in range(12)]
    assert [r["label"] for r in rows] == [n % 3 for n in range(12)]
    assert [r["txt"] for r in rows] == [f"photo {n}" for n in range(12)]
    assert all(min(r["height"], r["width"]) == 32 for r in rows)
    with Dataset(tmp_path / "out") as ds:
        assert ds.manifest.classes is None and ds.manifest.column("txt").type == "string"


@pytest.mark.parametrize("form", ["folder", "glob", "list", "url", "several"])
def test_every_way_of_naming_the_tars_gives_the_same_dataset(cli, shards: Path, tmp_path: Path,
                                                             form: str) -> None:
    src = {"folder": str(shards), "glob": f"{shards}/*.tar",
           "list": "::".join(str(p) for p in sorted(shards.glob("*.tar"))),
           "url": f"file://{shards}/shard-{{000000..000002}}.tar", "several": ""}[form]
    assert cli("convert", "images", f"{shards}/shard-{{000000..000002}}.tar", tmp_path / "a",
               "--short-side", 32).code == 0
    # "several": the tars as arguments of their own, as a shell expands an unquoted glob
    sources = sorted(shards.glob("*.tar")) if form == "several" else [src]
    result = cli("convert", "images", *sources, tmp_path / "b", "--short-side", 32)
    assert result.code == 0, result.err
    _same_files(tmp_path / "a", tmp_path / "b")


def test_any_number_of_workers_writes_the_same_bytes(cli, tmp_path: Path) -> None:
    write_tars(tmp_path / "shards", count=4, per_tar=10)
    for workers in (1, 3):
        assert cli("convert", "images", tmp_path / "shards", tmp_path / f"w{workers}",
                   "--short-side", 32, "--shard-size", "8KB", "--workers", workers).code == 0
    _same_files(tmp_path / "w1", tmp_path / "w3")


def test_image_and_label_fields(cli, tmp_path: Path) -> None:
    """ImageNet tars name their images .JPEG; the label may be a json key, names or ints; a
    png mask (seg.png) is not the image, and a sample with jpg and png takes the jpg. Photo n
    is 64 + n % 7 * 4 pixels wide and 48 high: 256 high, it is 363, 384, 405, 427 or 448 wide
    for n = 1 to 5."""
    samples = [
        {"__key__": "a", "JPEG": photo(1), "json": json.dumps({"label": "tench", "w": 1})},
        {"__key__": "b", "seg.png": photo(2), "jpg": photo(3), "png": photo(4),
         "json": json.dumps({"label": "goldfish"})},
        {"__key__": "c", "note": "x", "png": photo(5), "json": json.dumps({"label": 7})}]
    write_tar(tmp_path / "t.tar", samples)
    assert cli("convert", "images", tmp_path / "t.tar", tmp_path / "out").code == 0
    with Dataset(tmp_path / "out") as ds:
        assert ds.manifest.classes == ("7", "goldfish", "tench")
        assert [ds[i]["label"] for i in range(3)] == [2, 1, 0]
        assert [ds[i]["width"] for i in range(3)] == [363, 405, 448]
        assert [c.name for c in ds.manifest.columns][5:] == ["note"]  # not seg.png, not json
        assert [ds[i]["note"] for i in range(3)] == ["", "", "x"]
    chosen = cli("convert", "images", tmp_path / "t.tar", tmp_path / "chosen",
                 "--image-field", "png;JPEG", "--label-field", "json:w;json:label")
    assert chosen.code == 0, chosen.err
    with Dataset(tmp_path / "chosen") as ds:
        assert ds.manifest.classes == ("1", "7", "goldfish")
        assert [ds[i]["label"] for i in range(3)] == [0, 2, 1]
        assert [ds[i]["width"] for i in range(3)] == [363, 427, 448]


def test_a_sample_without_an_image_or_label_is_a_reject_naming_tar_and_key(cli,
                                                                          tmp_path: Path) -> None:
    samples = photo_samples(3)
    del samples[1]["jpg"]
    del samples[2]["cls"]
    write_tar(tmp_path / "t.tar", samples)
    result = cli("convert", "images", tmp_path / "t.tar", tmp_path / "out")
    assert result.code == 0, result.err
    assert _rejects(tmp_path / "out") == {
        "t.tar:000001": "no image member (its members: cls, txt)",
        "t.tar:000002": "no label: it has none of cls, json:label"}
    assert [r["path"] for r in _rows(tmp_path / "out")] == ["t.tar:000000"]


def test_a_key_split_across_two_tars_rejects_both_parts_naming_both(cli,
                                                                   tmp_path: Path) -> None:
    first, second = photo_samples(3), photo_samples(3, first=3)
    second[0]["__key__"] = first[-1]["__key__"]  # the writer rolled over mid-sample:
    del first[-1]["cls"], first[-1]["txt"], second[0]["jpg"]  # jpg here, cls and txt there
    write_tar(tmp_path / "a.tar", first)
    write_tar(tmp_path / "b.tar", second)
    result = cli("convert", "images", f"{tmp_path}/{{a,b}}.tar", tmp_path / "out")
    assert result.code == 0, result.err
    rejects = _rejects(tmp_path / "out")
    assert sorted(rejects) == ["a.tar:000002", "b.tar:000002"]
    for reason in rejects.values():
        assert "split across a.tar (byte " in reason and "and b.tar (byte 0)" in reason
    assert [r["path"] for r in _rows(tmp_path / "out")] == [
        "a.tar:000000", "a.tar:000001", "b.tar:000004", "b.tar:000005"]


def test_a_key_twice_in_one_tar_is_no_sample(cli, tmp_path: Path) -> None:
    samples = photo_samples(3)
    samples.append({**photo_samples(1, first=9)[0], "__key__": "000000"})
    write_tar(tmp_path / "t.tar", samples)
    result = cli("convert", "images", tmp_path / "t.tar", tmp_path / "out")
    assert result.code == 0, result.err
    rejects = list(map(json.loads, (tmp_path / "out/rejects.jsonl").read_text().splitlines()))
    assert [r["source"] for r in rejects] == ["t.tar:000000", "t.tar:000000"]
    assert all("appears twice in t.tar" in r["reason"] for r in rejects)


@pytest.mark.parametrize("cut", ["in a member", "in a header", "in the padding",
                                 "between members"])
def test_a_truncated_tar_keeps_the_samples_before_the_cut(cli, tmp_path: Path, cut: str) -> None:
    whole = write_tar(tmp_path / "whole.tar", photo_samples(5))
    with tarfile.open(whole) as tar:
        third, fourth = tar.getmember("000002.txt"), tar.getmember("000003.jpg")
    at = {"in a member": fourth.offset_data + 100, "in a header": fourth.offset + 100,
          "in the padding": third.offset_data + third.size + 10,
          "between members": fourth.offset}[cut]
    (tmp_path / "cut.tar").write_bytes(whole.read_bytes()[:at])
    result = cli("convert", "images", tmp_path / "cut.tar", tmp_path / "out")
    assert result.code == 0, result.err
    assert [r["path"] for r in _rows(tmp_path / "out")] == [f"cut.tar:{n:06d}" for n in range(3)]
    (source, reason), = _rejects(tmp_path / "out").items()
    assert source == ("cut.tar:000003" if cut == "in a member" else "cut.tar")
    assert reason.startswith(f"cut short at byte {at}: ")
    limited = cli("convert", "images", tmp_path / "cut.tar", tmp_path / "limited",
                  "--max-rejects", 0)
    assert limited.code == 1 and "more than --max-rejects 0" in limited.err


def test_members_that_belong_to_no_sample_are_listed(cli, tmp_path: Path) -> None:
    with tarfile.open(tmp_path / "t.tar", "w") as tar:
        add_member(tar, "README", "about these shards")
        add_member(tar, "__meta__/info.json", "{}")  # WebDataset's own: not a sample
        add_member(tar, "a.jpg", photo(0))
        add_member(tar, "a.cls", 1)
    result = cli("convert", "images", tmp_path / "t.tar", tmp_path / "out")
    assert result.code == 0, result.err
    assert _rejects(tmp_path / "out") == {
        "t.tar:README": "not a sample's member: its name is not KEY.EXTENSION"}


def test_a_file_that_is_not_a_tar_is_a_reject(cli, shards: Path, tmp_path: Path) -> None:
    (shards / "shard-000003.tar").write_bytes(b"not a tar at all " * 64)
    result = cli("convert", "images", shards, tmp_path / "out")
    assert result.code == 0, result.err
    (source, reason), = _rejects(tmp_path / "out").items()
    assert source == "shard-000003.tar" and reason.startswith("not a tar archive")


@pytest.mark.parametrize("src, message", [
    ("{tmp}/shards/shard-{{000007..000009}}.tar", "SRC {tmp}/shards/shard-000007.tar does "
                                                  "not exist"),
    ("{tmp}/shards/*.tar.gz", "matches no .tar/.parquet files"),
    ("{tmp}/nothing-*.tar", "matches no .tar files"),
    ("{tmp}/shards/shard-000000.tar::{tmp}/missing.tar", "SRC {tmp}/missing.tar does not exist"),
])
def test_a_pattern_that_names_nothing_is_one_line(shards: Path, tmp_path: Path, src: str,
                                                  message: str) -> None:
    result = run_cli_process("convert", "images", src.format(tmp=tmp_path), tmp_path / "out",
                             timeout=60)
    assert result.returncode == 2, result.stderr
    assert message.format(tmp=tmp_path) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_fields_apply_to_tars_and_parquet_only(cli, image_folder: Path, tmp_path: Path) -> None:
    result = cli("convert", "images", image_folder, tmp_path / "out", "--label-field", "cls")
    assert result.code == 2
    assert result.err.strip() == ("datapipe: error: --label-field applies to tar and Parquet "
                                  "sources; SRC is a folder")


def test_the_writing_process_reads_no_tar(shards: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Listing and reading happen in the workers: this process (the one writing the shards)
    would fail here if it opened a tar."""
    import preprocess.file_access

    writer = os.getpid()

    def only_in_workers(function):
        def guarded(*args, **kwargs):
            assert os.getpid() != writer, f"{function.__name__} ran in the writing process"
            return function(*args, **kwargs)
        return guarded

    monkeypatch.setattr(preprocess.file_access.RangeReader, "read",
                        only_in_workers(preprocess.file_access.RangeReader.read))
    monkeypatch.setattr("preprocess.tar_index.open_forward",
                        only_in_workers(preprocess.file_access.open_forward))
    result = convert_images(str(shards), OutputOptions(tmp_path / "out"),
                            ImageSettings(short_side=32), workers=2)
    assert result.manifest.num_samples == 12


def test_help_says_what_src_may_be(cli) -> None:
    result = cli("convert", "images", "--help")
    assert result.code == 0
    text = " ".join(result.out.split())
    for words in ("WebDataset tars", "shard-{000000..000146}.tar", "joined by '::'",
                  "Parquet files as Hugging Face datasets writes them", "--src-kind",
                  "--image-field", "--label-field", "json:KEY"):
        assert words in text, words


def test_a_member_extension_with_a_reserved_name_is_one_line(cli, tmp_path: Path) -> None:
    samples = photo_samples(2)
    samples[1]["width"] = 640
    write_tar(tmp_path / "t.tar", samples)
    result = cli("convert", "images", tmp_path / "t.tar", tmp_path / "out")
    assert result.code == 2
    assert result.err.startswith("datapipe: error: SRC t.tar: member extension 'width' is "
                                 "reserved")


def test_out_inside_a_folder_of_tars_is_not_a_class_folder(cli, shards: Path) -> None:
    """Once OUT exists inside SRC (a rerun, a resume), the folder is still one of tars."""
    assert cli("convert", "images", shards, shards / "out", "--short-side", 32).code == 0
    again = cli("convert", "images", shards, shards / "out", "--short-side", 32, "--overwrite")
    assert again.code == 0, again.err
    assert "converted 12 images of 12 inputs" in again.out


def test_a_fifo_among_the_tars_is_refused_not_waited_on(shards: Path, tmp_path: Path) -> None:
    os.mkfifo(shards / "shard-000003.tar")
    result = run_cli_process("convert", "images", shards, tmp_path / "out", timeout=60)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == (f"datapipe: error: {shards / 'shard-000003.tar'}: not a "
                                     "regular file (or a link to none)")
