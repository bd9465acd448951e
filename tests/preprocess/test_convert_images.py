from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from datapipe.format import Dataset
from tests.imagegen import make_image_folder, write_awkward_images


def _decode(payload: np.ndarray) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(payload.tobytes())))


def test_image_folder_labels_sizes_and_summary(cli, image_folder: Path, tmp_path: Path) -> None:
    result = cli("convert", "images", image_folder, tmp_path / "out", "--short-side", 48,
                 "--workers", 2)
    assert result.code == 0, result.err
    assert "converted 15 images" in result.out
    with Dataset(tmp_path / "out") as ds:
        assert ds.manifest.classes == ("class_0", "class_1", "class_2")
        assert sorted(ds.scalar("label").tolist()) == [0] * 5 + [1] * 5 + [2] * 5
        for i in range(len(ds)):
            row = ds[i]
            pixels = _decode(row["image"])
            assert pixels.shape == (row["height"], row["width"], 3)
            assert min(row["height"], row["width"]) == 48
            assert row["path"].startswith(f"class_{row['label']}/")


def test_short_side_zero_keeps_size_and_raw_encoding(cli, image_folder: Path,
                                                     tmp_path: Path) -> None:
    assert cli("convert", "images", image_folder, tmp_path / "raw", "--short-side", 0,
               "--encoding", "raw").code == 0
    with Dataset(tmp_path / "raw") as ds:
        row = ds[0]
        original = np.asarray(Image.open(image_folder / row["path"]).convert("RGB"))
        assert (row["height"], row["width"]) == original.shape[:2]
        np.testing.assert_array_equal(row["image"].reshape(original.shape), original)


def test_awkward_images_are_converted_or_rejected_with_reasons(cli, tmp_path: Path) -> None:
    src = tmp_path / "src"
    expected = write_awkward_images(src / "odd")
    result = cli("convert", "images", src, tmp_path / "out", "--short-side", 0)
    assert result.code == 0, result.err
    assert "rejected 3 inputs" in result.out
    rejects = [json.loads(line) for line in (tmp_path / "out/rejects.jsonl").read_text()
               .splitlines()]
    assert sorted(r["source"] for r in rejects) == sorted(
        f"odd/{n}" for n, what in expected.items() if what == "reject")
    assert all(r["reason"] for r in rejects)
    with Dataset(tmp_path / "out") as ds:
        rows = {ds[i]["path"].split("/")[1]: ds[i] for i in range(len(ds))}
    assert sorted(rows) == sorted(n for n, what in expected.items() if what == "ok")
    for row in rows.values():
        assert _decode(row["image"]).shape == (row["height"], row["width"], 3)
    gray = _decode(rows["gray.jpg"]["image"]).astype(int)
    assert np.abs(gray[..., 0] - gray[..., 1]).max() <= 2  # grey stays grey in RGB
    alpha = _decode(rows["alpha.png"]["image"])
    assert alpha[:, :30].min() > 240, "transparent pixels are composited onto white"
    rotated = rows["rotated.jpg"]
    assert (rotated["height"], rotated["width"]) == (80, 60), "EXIF orientation applied"
    cmyk = _decode(rows["cmyk.jpg"]["image"]).astype(int)
    reference = _decode(rows["gray.jpg"]["image"])  # same scene; sanity of CMYK colours
    assert cmyk.shape == reference.shape and 20 < cmyk.mean() < 235


def test_strict_stops_at_first_bad_file_naming_it(cli, tmp_path: Path) -> None:
    src = make_image_folder(tmp_path / "src", classes=1, per_class=2)
    (src / "class_0" / "broken.jpg").write_bytes(b"\xff\xd8garbage")
    result = cli("convert", "images", src, tmp_path / "out", "--strict")
    assert result.code != 0
    assert "broken.jpg" in result.err and len(result.err.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_csv_manifest_with_named_labels_and_typed_extras(cli, tmp_path: Path) -> None:
    src = make_image_folder(tmp_path / "imgs", classes=2, per_class=2)
    files = sorted(p.relative_to(tmp_path) for p in src.rglob("*.jpg"))
    lines = ["path,label,weight,split,caption"]
    for i, f in enumerate(files):
        lines.append(f"{f},{'cat' if i % 2 else 'dog'},{i},{i / 2},text {i}")
    (tmp_path / "list.csv").write_text("\n".join(lines) + "\n")
    assert cli("convert", "images", tmp_path / "list.csv", tmp_path / "out").code == 0
    with Dataset(tmp_path / "out") as ds:
        m = ds.manifest
        assert m.classes == ("cat", "dog")
        assert m.column("weight").type == "int64" and m.column("split").type == "float64"
        assert m.column("caption").type == "string"
        assert [ds[i]["label"] for i in range(4)] == [1, 0, 1, 0]
        assert ds[3]["split"] == 1.5 and ds[2]["caption"] == "text 2"


def test_jsonl_manifest_and_missing_file_is_rejected(cli, tmp_path: Path) -> None:
    src = make_image_folder(tmp_path / "imgs", classes=1, per_class=2)
    records = [{"path": str(p.relative_to(tmp_path)), "label": 3} for p in src.rglob("*.jpg")]
    records.append({"path": "imgs/nowhere.jpg", "label": 4})
    (tmp_path / "list.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    result = cli("convert", "images", tmp_path / "list.jsonl", tmp_path / "out")
    assert result.code == 0 and "rejected 1 input, listed with reasons in " in result.out
    reject = json.loads((tmp_path / "out/rejects.jsonl").read_text())
    assert reject["source"] == "imgs/nowhere.jpg" and "unreadable" in reject["reason"]


@pytest.mark.parametrize("fmt", ["arrow", "msgpack"])
def test_conversion_is_deterministic(cli, image_folder: Path, tmp_path: Path, fmt: str) -> None:
    for name in ("a", "b"):
        assert cli("convert", "images", image_folder, tmp_path / name, "--format", fmt,
                   "--shard-size", "20KB", "--workers", 2 if name == "a" else 1).code == 0
    a = sorted((tmp_path / "a").iterdir())
    assert len([p for p in a if p.name.startswith("shard-")]) > 1
    for path in a:
        assert path.read_bytes() == (tmp_path / "b" / path.name).read_bytes(), path.name


def test_msgpack_and_arrow_hold_the_same_samples(cli, image_folder: Path, tmp_path: Path) -> None:
    for fmt in ("arrow", "msgpack"):
        assert cli("convert", "images", image_folder, tmp_path / fmt, "--format", fmt).code == 0
    with Dataset(tmp_path / "arrow") as a, Dataset(tmp_path / "msgpack") as m:
        assert len(a) == len(m)
        for i in range(len(a)):
            ra, rm = a[i], m[i]
            assert bytes(ra["image"]) == bytes(rm["image"])
            assert (ra["label"], ra["height"], ra["path"]) == (rm["label"], rm["height"],
                                                                rm["path"])


@pytest.mark.parametrize("args, message", [
    (["convert", "images", "{tmp}/missing", "{tmp}/out"], "does not exist"),
    (["convert", "images", "{src}", "{tmp}/out", "--quality", "0"], "--quality"),
    (["convert", "images", "{src}", "{tmp}/out", "--shard-size", "lots"], "--shard-size"),
    (["convert", "images", "{src}", "{tmp}/out", "--encoding", "webp"], "--encoding"),
    (["convert", "images", "{src}"], "OUT"),
    (["convert", "images", "{src}", "{src}/class_0/img_000.jpg/out"], "Not a directory"),
    (["convert", "images", "{src}", "{tmp}/" + "x" * 300], "File name too long"),
    (["convert", "images", "{tmp}/" + "x" * 300, "{tmp}/out"], "File name too long"),
])
def test_bad_arguments_give_one_line_and_nonzero_exit(cli, image_folder: Path, tmp_path: Path,
                                                      args: list[str], message: str) -> None:
    argv = [a.format(tmp=tmp_path, src=image_folder) for a in args]
    result = cli(*argv)
    assert result.code == 2
    assert message in result.err and len(result.err.strip().splitlines()) == 1
    assert "Traceback" not in result.err


def test_out_not_empty_needs_overwrite(cli, image_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli("convert", "images", image_folder, out).code == 0
    again = cli("convert", "images", image_folder, out)
    assert again.code == 2 and "--overwrite" in again.err
    assert cli("convert", "images", image_folder, out, "--overwrite", "--short-side", 32).code == 0
    with Dataset(out) as ds:
        assert min(ds[0]["height"], ds[0]["width"]) == 32
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("keep me")
    result = cli("convert", "images", image_folder, foreign, "--overwrite")
    assert result.code == 2 and "thesis.tex" in result.err
    assert (foreign / "thesis.tex").read_text() == "keep me"
    assert [p.name for p in foreign.iterdir()] == ["thesis.tex"]  # and no lock left behind
