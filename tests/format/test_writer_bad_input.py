"""What DatasetWriter refuses: a schema or setting no dataset can have is one ArgumentError line
before anything is written (the output folder is not even made); a sample that does not match
the columns is one DataError line naming its position and column, and is not written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import datapipe as dp
from datapipe.errors import ArgumentError, DataError
from datapipe.format import Column
from tests.imagegen import jpeg_bytes, noise_image


def png_bytes() -> bytes:
    import io

    out = io.BytesIO()
    noise_image(8, 8, seed=1).save(out, "PNG")
    return out.getvalue()


SCHEMA_MISTAKES = [
    ({"x": "int128"}, {}, r"column 'x': unknown type 'int128'; give jpeg, png"),
    ({"x": 5}, {}, r"column 'x': the type is a string"),
    ({"x": "float32[0]"}, {}, r"column 'x': unknown type 'float32\[0\]'"),
    ({}, {}, r"columns: empty; declare at least one"),
    ([("x", "int64"), ("x", "string")], {}, r"columns: 'x' is declared twice"),
    ({"": "int64"}, {}, r"column names are non-empty strings"),
    ({"image": "jpeg", "height": "int32"}, {}, r"'height' is a reserved name in an image dataset"),
    ({"image": "jpeg", "index": "int64"}, {}, r"'index' is a reserved name"),
    ({"tokens": "uint16[]", "length": "int32"}, {}, r"'length' is a reserved name in a text"),
    ({"tokens": "uint16[]", "labels": "int64"}, {}, r"'labels' is a reserved name in a text"),
    ({"img": "jpeg"}, {}, r"column 'img': the image column is called 'image'"),
    ({"image": "jpeg", "mask": "png"}, {}, r"'image' and 'mask' are both images"),
    ({"image": "jpeg", "label": "string"}, {}, r"an image dataset's labels are integers"),
    ({"tokens": "int32[]"}, {}, r"column 'tokens': token ids are uint8\[\], uint16\[\] or "
                                r"uint32\[\]"),
    ({"tokens": "uint16[4]"}, {}, r"column 'tokens': token ids are"),
    ({"n": "int64"}, {"classes": ["a"]}, r"classes: only an image dataset"),
    ({"image": "jpeg", "label": "int64"}, {"classes": "ab"}, r"classes: give the class names"),
    ({"n": "int64"}, {"shard_format": "parquet"}, r"shard_format: 'parquet' is not one of"),
    ({"n": "int64"}, {"shard_size": "lots"}, r"shard_size: cannot read 'lots' as a size"),
    ({"n": "int64"}, {"shard_size": 0}, r"shard_size: 0 is out of range"),
    ({"n": "int64"}, {"overwrite": "yes"}, r"overwrite: True or False"),
    ({"n": "int64"}, {"part": 0}, r"part and parts go together"),
    ({"n": "int64"}, {"part": 3, "parts": 3}, r"part=3, parts=3: give parts=N"),
    ({"n": "int64"}, {"part": -1, "parts": 3}, r"give parts=N"),
]


@pytest.mark.parametrize(("columns", "options", "message"), SCHEMA_MISTAKES)
def test_a_schema_mistake_is_one_line_before_anything_is_written(
        tmp_path: Path, columns: Any, options: dict, message: str) -> None:
    out = tmp_path / "out"
    with pytest.raises(ArgumentError, match=message) as refused:
        dp.DatasetWriter(out, columns, **options)
    assert "\n" not in str(refused.value)
    assert not out.exists()


def _jpeg() -> bytes:
    return jpeg_bytes(noise_image(8, 6, seed=0))


GOOD = {"image": _jpeg(), "label": 1, "score": 0.5, "name": "a", "vec": np.zeros(3, np.float32),
        "ids": np.arange(4, dtype=np.uint16), "count": 7}
COLUMNS = {"image": "jpeg", "label": "int64", "score": "float32", "name": "string",
           "vec": "float32[3]", "ids": "uint16[]", "count": "uint8"}

SAMPLE_MISTAKES = [
    ({"label": None}, "column 'label': expected an int64 number, got NoneType None"),
    ({"label": True}, "column 'label': expected an int64 number, got bool True"),
    ({"label": 5}, "column 'label': label 5 is not one of the 3 classes"),
    ({"label": 2.0}, "column 'label': expected an int64 number, got float 2.0"),
    ({"count": 256}, "column 'count': 256 is out of the range of uint8"),
    ({"count": -1}, "column 'count': -1 is out of the range of uint8"),
    ({"score": "0.5"}, "column 'score': expected a float32 number, got str '0.5'"),
    ({"name": b"a"}, "column 'name': expected a str, got bytes b'a'"),
    ({"name": "\ud800"}, "column 'name': a str that is not valid Unicode"),
    ({"image": b"not an image"}, "column 'image': not a JPEG image"),
    ({"image": png_bytes()}, "column 'image': not a JPEG image"),
    ({"image": "photo.jpg"}, "column 'image': expected bytes, got str 'photo.jpg'"),
    ({"vec": np.zeros(4, np.float32)}, r"column 'vec': has shape \(4,\); the column holds "
                                       r"float32 of shape \(3,\)"),
    ({"vec": ["a", "b", "c"]}, "column 'vec': holds <U1 values; the column holds float32"),
    ({"vec": [[1, 2], [3]]}, "column 'vec': not an array of numbers"),
    ({"ids": np.array([1.5])}, "column 'ids': holds float64 values; the column holds uint16"),
    ({"ids": [-1, 3]}, "column 'ids': holds -1, out of the range of uint16"),
    ({"ids": [70000]}, "column 'ids': holds 70000, out of the range of uint16"),
    ({"ids": np.zeros((2, 2), np.uint16)}, r"column 'ids': has shape \(2, 2\); the column "
                                           r"holds 1-D uint16 arrays"),
    ({"score": 1e40}, r"column 'score': 1e\+40 is out of the range of float32 \(at most "
                      r"±3.402823e\+38; it would be stored as inf\)"),
    ({"score": 10**400}, r"column 'score': int 1000000000.* is out of the range of float32"),
    ({"vec": [0.0, -1e39, 1.0]}, r"column 'vec': holds -1e\+39, out of the range of float32"),
]


@pytest.mark.parametrize(("change", "message"), SAMPLE_MISTAKES)
def test_a_sample_that_does_not_fit_is_one_line_naming_it_and_is_not_written(
        tmp_path: Path, change: dict, message: str) -> None:
    with dp.DatasetWriter(tmp_path / "out", COLUMNS, classes=["a", "b", "c"]) as writer:
        writer.write_all([GOOD, GOOD])
        with pytest.raises(DataError, match=f"DatasetWriter out {tmp_path / 'out'}: sample 2, "
                                            f"{message}") as refused:
            writer.write({**GOOD, **change})
        assert "\n" not in str(refused.value)
        writer.write(GOOD)
    assert writer.manifest.num_samples == 3


@pytest.mark.parametrize(("sample", "message"), [
    ({k: v for k, v in GOOD.items() if k != "vec"}, r"sample 0: no value for column 'vec' "
                                                    r"\(columns: count, ids, image"),
    ({**GOOD, "extra": 1}, r"sample 0: column 'extra' is not declared \(columns: count, "),
    ([1, 2], r"sample 0 is a list, not a dict of columns"),
])
def test_a_sample_missing_a_column_or_with_an_extra_one_is_refused(
        tmp_path: Path, sample: Any, message: str) -> None:
    with pytest.raises(DataError, match=message), \
            dp.DatasetWriter(tmp_path / "out", COLUMNS) as writer:
        writer.write(sample)
    assert list((tmp_path / "out").iterdir()) == []  # left the block: no dataset


def test_pixels_must_be_an_rgb_uint8_array(tmp_path: Path) -> None:
    with dp.DatasetWriter(tmp_path / "out", {"image": "pixels"}) as writer:
        writer.write({"image": np.zeros((4, 5, 3), np.uint8)})
        for number, bad in enumerate((np.zeros((4, 5), np.uint8), np.zeros((4, 5, 3), np.float32),
                                      np.zeros((4, 5, 4), np.uint8), b"\0" * 60), 1):
            with pytest.raises(DataError, match=rf"sample {number}, column 'image': expected "
                                                r"RGB pixels, a uint8 array of shape"):
                writer.write({"image": bad})
    assert writer.manifest.settings["encoding"] == "raw"


# (column type, value, what it must be stored as: None where it is refused)
FLOATS_AS_GIVEN = [
    ("float16", 1e6, None),
    ("float16", 65520.0, None),  # rounds to inf: the first value past float16's range
    ("float16", 65519.0, 65504.0),  # rounds to float16's largest
    ("float16", np.int32(70000), None),
    ("float16", -np.float32(1e5), None),
    ("float32", np.float64(1e40), None),
    ("float32", 3.4e38, float(np.float32(3.4e38))),
    ("float32", float("inf"), float("inf")),  # inf and nan given as such are stored as such
    ("float32", float("-inf"), float("-inf")),
    ("float64", 10**308, 1e308),
    ("float64", 10**309, None),
    ("float16[]", np.array([1.0, 1e5], np.float32), None),
    ("float16[]", np.array([np.nan, 7e4, 1.0]), None),  # the nan does not hide 7e4
    ("float16[]", np.array([np.nan, np.inf, 65504.0]), [np.nan, np.inf, 65504.0]),
    ("float16[]", np.array([100000], np.int64), None),
    ("float16[]", np.array([-32768, 2048], np.int16), [-32768.0, 2048.0]),
    ("float32[2]", [1e39, 0.0], None),
    ("float32[2,1]", [[-np.inf], [3.0]], [-np.inf, 3.0]),
]


@pytest.mark.parametrize(("kind", "value", "stored"), FLOATS_AS_GIVEN,
                         ids=[f"{k}-{v!r}"[:40] for k, v, _ in FLOATS_AS_GIVEN])
def test_a_float_is_stored_as_given_or_refused_naming_sample_and_column(
        tmp_path: Path, kind: str, value: Any, stored: Any) -> None:
    """A finite number too large for its column would be stored as inf (numpy's cast, with a
    warning naming nothing): it is refused as an int out of range is."""
    column = Column("x", kind)
    with dp.DatasetWriter(tmp_path / "out", {"x": kind}) as writer:
        writer.write({"x": 1 if column.is_scalar else np.ones(column.shape or 1)})
        if stored is None:
            with pytest.raises(DataError, match=r"sample 1, column 'x': .*out of the range of "
                                                r"float") as refused:
                writer.write({"x": value})
            assert "\n" not in str(refused.value)
        else:
            writer.write({"x": value})
    with dp.Dataset(tmp_path / "out") as ds:
        assert len(ds) == (1 if stored is None else 2)
        if stored is not None:
            np.testing.assert_array_equal(np.ravel(ds[1]["x"]).astype(np.float64),
                                          np.ravel(stored))


@pytest.mark.parametrize("fmt", ["arrow", "msgpack"])
def test_shards_written_before_a_refused_float_stay_whole(tmp_path: Path, fmt: str) -> None:
    """The samples before and after a refused one are all there, in shards that verify."""
    from datapipe.inspection import verify

    columns = {"score": "float32", "vec": "float16[4]"}
    with dp.DatasetWriter(tmp_path / "out", columns, shard_format=fmt,
                          shard_size="1KB") as writer:
        writer.write_all({"score": i / 3, "vec": np.full(4, i, np.float64)} for i in range(200))
        finished = list((tmp_path / "out").glob("shard-*"))
        with pytest.raises(DataError, match=r"sample 200, column 'vec': holds 100000, out "
                                            r"of the range of float16"):
            writer.write({"score": 1.0, "vec": [1.0, 1e5, 0.0, 0.0]})
        with pytest.raises(DataError, match=r"sample 201, column 'score': 1e\+39"):
            writer.write({"score": 1e39, "vec": np.zeros(4)})
        writer.write({"score": -1.0, "vec": np.zeros(4)})
    assert len(finished) > 1
    manifest, problems = verify(tmp_path / "out")
    assert problems == [] and manifest.num_samples == 201
    with dp.Dataset(tmp_path / "out") as ds:
        assert [float(ds[i]["score"]) for i in (0, 3, 199, 200)] == \
            [0.0, 1.0, float(np.float32(199 / 3)), -1.0]
        assert ds[150]["vec"].tolist() == [150.0] * 4
