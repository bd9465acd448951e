"""Parquet files laid out as Hugging Face `datasets` writes them, as the input of `datapipe
convert images`: the image column (a struct of bytes and path, or binary), the label column and
its ClassLabel names, other scalar columns as extras; a row that cannot be converted is a
reject naming file and row, a file without the columns asked for is one line before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datapipe.format import Dataset
from tests.conftest import run_cli_process
from tests.preprocess.sample_files import photo, photo_rows, write_hf_parquet, write_tars


def _rejects(out: Path) -> dict[str, str]:
    lines = (out / "rejects.jsonl").read_text().splitlines()
    return {r["source"]: r["reason"] for r in map(json.loads, lines)}


def _same_files(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_rows_labels_class_names_and_extra_columns(cli, tmp_path: Path) -> None:
    rows = photo_rows(10)
    write_hf_parquet(tmp_path / "train.parquet", rows["images"], row_group_size=4,
                     label=rows["label"], caption=rows["caption"], id=list(range(100, 110)),
                     boxes=[[1.0, 2.0]] * 10)
    result = cli("convert", "images", tmp_path / "train.parquet", tmp_path / "out",
                 "--short-side", 32, "--workers", 2)
    assert result.code == 0, result.err
    with Dataset(tmp_path / "out") as ds:
        m = ds.manifest
        assert m.classes == ("cat", "dog", "fish")  # the ClassLabel's names
        assert [(c.name, c.type) for c in m.columns][5:] == [("caption", "string"),
                                                             ("id", "int64")]  # boxes: a list
        got = [ds[i] for i in range(len(ds))]
    assert [r["path"] for r in got] == [f"train.parquet#row{n}" for n in range(10)]
    assert [r["label"] for r in got] == rows["label"]
    assert [r["caption"] for r in got] == rows["caption"]
    assert [r["id"] for r in got] == list(range(100, 110))


def test_a_file_written_by_datasets_stores_what_the_folder_stores(cli, tmp_path: Path) -> None:
    """The same photo gives the same stored bytes from a Parquet file as from a folder."""
    datasets = pytest.importorskip("datasets")
    rows = photo_rows(6, width=300, height=200)
    for n, data in enumerate(rows["images"]):
        folder = tmp_path / "folder" / "cat dog fish".split()[rows["label"][n]]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{n}.jpg").write_bytes(data)
    table = datasets.Dataset.from_dict({
        "image": [{"bytes": b, "path": f"{n}.jpg"} for n, b in enumerate(rows["images"])],
        "label": rows["label"]})
    table = table.cast_column("image", datasets.Image()).cast_column(
        "label", datasets.ClassLabel(names=["cat", "dog", "fish"]))
    table.to_parquet(str(tmp_path / "hf" / "train-00000-of-00001.parquet"))
    assert cli("convert", "images", tmp_path / "folder", tmp_path / "from-folder").code == 0
    result = cli("convert", "images", tmp_path / "hf", tmp_path / "from-parquet")
    assert result.code == 0, result.err
    with Dataset(tmp_path / "from-folder") as folder, \
            Dataset(tmp_path / "from-parquet") as parquet:
        assert parquet.manifest.classes == folder.manifest.classes
        by_name = {folder[i]["path"].split("/")[1]: folder[i] for i in range(len(folder))}
        for i in range(len(parquet)):
            row, twin = parquet[i], by_name[f"{i}.jpg"]
            assert bytes(row["image"]) == bytes(twin["image"])
            assert (row["label"], row["height"], row["width"]) == \
                (twin["label"], twin["height"], twin["width"])


def test_cifar_layout_img_column_of_plain_binary(cli, tmp_path: Path) -> None:
    pq.write_table(pa.table({"img": [photo(n) for n in range(4)], "label": [3, 1, 4, 1]}),
                   tmp_path / "cifar.parquet")
    assert cli("convert", "images", tmp_path / "cifar.parquet", tmp_path / "out").code == 0
    with Dataset(tmp_path / "out") as ds:
        assert [ds[i]["label"] for i in range(4)] == [3, 1, 4, 1]
        assert ds.manifest.classes is None


def test_null_or_broken_cells_are_rejects_naming_file_and_row(cli, tmp_path: Path) -> None:
    images: list[bytes | None] = [photo(n) for n in range(6)]
    images[1], images[4] = None, b"not an image at all"
    labels = [0, 1, 2, None, 1, 0]
    write_hf_parquet(tmp_path / "x.parquet", images, row_group_size=4, label=labels)
    result = cli("convert", "images", tmp_path / "x.parquet", tmp_path / "out", "--workers", 2)
    assert result.code == 0, result.err
    rejects = _rejects(tmp_path / "out")
    assert sorted(rejects) == ["x.parquet#row1", "x.parquet#row3", "x.parquet#row4"]
    assert rejects["x.parquet#row1"] == "the image is null"
    assert rejects["x.parquet#row3"] == "the label is null"
    assert rejects["x.parquet#row4"].startswith("not an image")
    with Dataset(tmp_path / "out") as ds:
        assert [ds[i]["path"] for i in range(len(ds))] == [
            "x.parquet#row0", "x.parquet#row2", "x.parquet#row5"]


@pytest.mark.parametrize("args, message", [
    ([], "x.parquet: no image column 'image' or 'img'; its columns are pixels, target "
         "(name the image column with --image-field)"),
    (["--image-field", "pixels", "--label-field", "fine_label"],
     "x.parquet: no label column 'fine_label'; its columns are pixels, target "
     "(name the label column with --label-field)"),
    (["--image-field", "target"], "x.parquet: column 'target' holds int64, not encoded images"),
])
def test_missing_columns_are_one_line_before_any_work(tmp_path: Path, args: list[str],
                                                      message: str) -> None:
    pq.write_table(pa.table({"pixels": [photo(0)], "target": [1]}), tmp_path / "x.parquet")
    result = run_cli_process("convert", "images", tmp_path / "x.parquet", tmp_path / "out",
                             *args, timeout=60)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert message in result.stderr
    assert not (tmp_path / "out").exists()


def test_many_files_and_split_row_groups_give_the_same_bytes_for_any_workers(
        cli, tmp_path: Path) -> None:
    """One file's single row group of 150 rows is split over several tasks (each worker reads
    on from where its last task stopped); another has row groups of 7."""
    big, small = photo_rows(150, width=24, height=16), photo_rows(40, first=150)
    write_hf_parquet(tmp_path / "data" / "train-0.parquet", big["images"],
                     row_group_size=1000, label=big["label"])
    write_hf_parquet(tmp_path / "data" / "train-1.parquet", small["images"],
                     row_group_size=7, label=small["label"])
    for workers in (1, 3):
        result = cli("convert", "images", tmp_path / "data", tmp_path / f"w{workers}",
                     "--short-side", 16, "--shard-size", "16KB", "--workers", workers)
        assert result.code == 0, result.err
    _same_files(tmp_path / "w1", tmp_path / "w3")
    with Dataset(tmp_path / "w3") as ds:
        assert len(ds) == 190
        assert ds[160]["path"] == "train-1.parquet#row10"


def test_a_folder_of_tars_and_parquet_asks_which(cli, tmp_path: Path) -> None:
    write_tars(tmp_path / "mixed", count=1, per_tar=2)
    write_hf_parquet(tmp_path / "mixed" / "x.parquet", [photo(0)])
    result = cli("convert", "images", tmp_path / "mixed", tmp_path / "out")
    assert result.code == 2 and "holds both .tar and .parquet files" in result.err
    chosen = cli("convert", "images", tmp_path / "mixed", tmp_path / "out", "--src-kind",
                 "parquet")
    assert chosen.code == 0, chosen.err


@pytest.mark.parametrize("name", ["height", "index"])  # index: a key of every Loader batch
def test_a_scalar_column_with_a_reserved_name_is_one_line(cli, tmp_path: Path,
                                                          name: str) -> None:
    write_hf_parquet(tmp_path / "x.parquet", [photo(0)], label=[0], **{name: [480]})
    result = cli("convert", "images", tmp_path / "x.parquet", tmp_path / "out")
    assert result.code == 2
    assert result.err.startswith(f"datapipe: error: SRC x.parquet: column name {name!r} is "
                                 "reserved")


@pytest.mark.parametrize("name", ["labels", "breed"])
def test_a_labels_column_or_the_one_class_label_is_the_label(cli, tmp_path: Path,
                                                             name: str) -> None:
    """cats_vs_dogs names its label column `labels`; a file whose one ClassLabel column has
    another name labels by it too."""
    features = {"info": {"features": {"image": {"_type": "Image"}, name: {
        "names": ["cat", "dog"], "_type": "ClassLabel"}}}}
    table = pa.table({"image": [photo(0), photo(1)], name: [1, 0]})
    pq.write_table(table.replace_schema_metadata({"huggingface": json.dumps(features)}),
                   tmp_path / "x.parquet")
    assert cli("convert", "images", tmp_path / "x.parquet", tmp_path / "out").code == 0
    with Dataset(tmp_path / "out") as ds:
        assert ds.manifest.classes == ("cat", "dog")
        assert [ds[i]["label"] for i in range(2)] == [1, 0]
        assert [c.name for c in ds.manifest.columns][5:] == []
