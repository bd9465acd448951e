"""Captions tokenized at conversion: from tars written by the `webdataset` library, Parquet
files, CSV/JSONL lists and sidecar files in a folder, every stored caption is the tokenizer's
own ids of its text; several captions per image are kept in order; what cannot be a caption
is one line naming the sample, never a silently dropped image."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from datapipe.format import Dataset
from tests.captions_data import caption, clip_style_tokenizer
from tests.imagegen import jpeg_bytes, noise_image
from tests.preprocess.sample_files import write_hf_parquet


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clip_style_tokenizer(tmp_path_factory.mktemp("tok"))


def _photo(n: int) -> bytes:
    return jpeg_bytes(noise_image(40 + n % 5 * 4, 32, n))


def _write_wds(path: Path, captions: list) -> Path:
    """A tar as webdataset's TarWriter writes it: jpg, json (the captions) and cls members."""
    import webdataset as wds

    path.parent.mkdir(parents=True, exist_ok=True)
    with wds.TarWriter(str(path)) as sink:
        for n, value in enumerate(captions):
            sink.write({"__key__": f"{n:06d}", "jpg": _photo(n), "cls": n % 2,
                        "json": json.dumps({"caption": value, "url": f"http://x/{n}"})})
    return path


def _stored(out: Path) -> list[list[list[int]]]:
    """Each sample's captions as lists of ids, split by their stored lengths."""
    with Dataset(out) as ds:
        samples = []
        for i in range(len(ds)):
            row = ds[i]
            ends = np.cumsum(row["caption_lengths"])
            samples.append([part.tolist() for part in
                            np.split(row["caption_ids"], ends[:-1])])
        return samples


def _own_ids(tokenizer_path: Path, texts: list[str], max_tokens: int | None = None) -> list:
    tok = Tokenizer.from_file(str(tokenizer_path))
    if max_tokens:
        tok.enable_truncation(max_tokens)
    return [tok.encode(t).ids for t in texts]


def _convert(cli, src: Path, out: Path, tokenizer: Path, *args: object):
    return cli("convert", "images", src, out, "--short-side", 32, "--workers", 1,
               "--tokenizer", tokenizer, *args)


def test_tar_captions_are_the_tokenizers_own_ids_several_per_image_in_order(
        cli, tokenizer_path: Path, tmp_path: Path) -> None:
    captions = [[caption(n + k) for k in range(5)] if n % 3 == 0 else caption(n)
                for n in range(12)]
    _write_wds(tmp_path / "wds" / "a.tar", captions)
    result = _convert(cli, tmp_path / "wds" / "a.tar", tmp_path / "out", tokenizer_path,
                      "--keep-caption-text")
    assert result.code == 0, result.err
    stored = _stored(tmp_path / "out")
    for value, got in zip(captions, stored, strict=True):
        texts = value if isinstance(value, list) else [value]
        assert got == _own_ids(tokenizer_path, texts)
    with Dataset(tmp_path / "out") as ds:
        assert json.loads(ds[0]["captions"]) == captions[0]
        assert ds.manifest.column("caption_ids").type == "uint16[]"  # 300 ids
        assert "json" not in ds.manifest.column_names  # read for the caption, no column
        tok = Tokenizer.from_file(str(tokenizer_path))
        assert ds.manifest.tokenizer["eos_id"] == tok.token_to_id("<|endoftext|>")
        assert ds.manifest.tokenizer["bos_id"] == tok.token_to_id("<|startoftext|>")
        assert ds.manifest.stats["captions"] == {
            "captions": 4 * 5 + 8, "truncated": 0,
            "longest": max(len(ids) for sample in stored for ids in sample)}


def test_a_txt_member_is_the_default_caption_and_leaves_the_extra_columns(
        cli, tokenizer_path: Path, tmp_path: Path) -> None:
    import webdataset as wds

    (tmp_path / "wds").mkdir()
    with wds.TarWriter(str(tmp_path / "wds" / "a.tar")) as sink:
        for n in range(4):
            sink.write({"__key__": f"k{n}", "jpg": _photo(n), "txt": caption(n) + "\n",
                        "author": f"someone {n}"})
    assert _convert(cli, tmp_path / "wds", tmp_path / "out", tokenizer_path).code == 0
    assert _stored(tmp_path / "out") == [_own_ids(tokenizer_path, [caption(n)])
                                         for n in range(4)]
    with Dataset(tmp_path / "out") as ds:
        assert "txt" not in ds.manifest.column_names and "author" in ds.manifest.column_names


def test_parquet_captions_a_string_or_a_list_column(cli, tokenizer_path: Path,
                                                    tmp_path: Path) -> None:
    write_hf_parquet(tmp_path / "pq" / "a.parquet", [_photo(n) for n in range(6)],
                     row_group_size=4, caption=[caption(n) for n in range(6)],
                     sentences=[[caption(n), caption(n + 50)] for n in range(6)])
    assert _convert(cli, tmp_path / "pq" / "a.parquet", tmp_path / "one",
                    tokenizer_path).code == 0
    assert _stored(tmp_path / "one") == [_own_ids(tokenizer_path, [caption(n)])
                                         for n in range(6)]
    assert _convert(cli, tmp_path / "pq" / "a.parquet", tmp_path / "two", tokenizer_path,
                    "--caption-field", "sentences").code == 0
    assert _stored(tmp_path / "two") == [_own_ids(tokenizer_path, [caption(n), caption(n + 50)])
                                         for n in range(6)]


def test_list_and_folder_sidecar_captions(cli, tokenizer_path: Path, tmp_path: Path) -> None:
    folder = tmp_path / "folder" / "cats"
    folder.mkdir(parents=True)
    for n in range(3):
        (folder / f"img{n}.jpg").write_bytes(_photo(n))
        (folder / f"img{n}.txt").write_text(caption(n) + "\n")
    assert _convert(cli, tmp_path / "folder", tmp_path / "f_out", tokenizer_path).code == 0
    assert _stored(tmp_path / "f_out") == [_own_ids(tokenizer_path, [caption(n)])
                                           for n in range(3)]
    lines = [{"path": f"folder/cats/img{n}.jpg", "caption": [caption(n), caption(n + 9)]}
             for n in range(3)]
    (tmp_path / "list.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert _convert(cli, tmp_path / "list.jsonl", tmp_path / "l_out", tokenizer_path).code == 0
    assert _stored(tmp_path / "l_out") == [_own_ids(tokenizer_path, [caption(n), caption(n + 9)])
                                           for n in range(3)]
    (tmp_path / "list.csv").write_text("path,label,caption\n" + "".join(
        f"folder/cats/img{n}.jpg,{n},\"{caption(n)}\"\n" for n in range(3)))
    assert _convert(cli, tmp_path / "list.csv", tmp_path / "c_out", tokenizer_path).code == 0
    assert _stored(tmp_path / "c_out") == [_own_ids(tokenizer_path, [caption(n)])
                                           for n in range(3)]


def test_the_bytes_tokenizer_stores_utf8_bytes_then_its_end_of_text(cli, tmp_path: Path) -> None:
    _write_wds(tmp_path / "a.tar", ["café au lait", ["a", "bb"]])
    assert _convert(cli, tmp_path / "a.tar", tmp_path / "out", "bytes").code == 0
    assert _stored(tmp_path / "out") == [[[*"café au lait".encode(), 256]],
                                         [[97, 256], [98, 98, 256]]]
    with Dataset(tmp_path / "out") as ds:
        assert ds.manifest.column("caption_ids").type == "uint16[]"  # 257 ids


def test_over_long_captions_are_cut_keeping_end_of_text_and_counted(
        cli, tokenizer_path: Path, tmp_path: Path) -> None:
    captions = [caption(n, words=1 if n % 2 else 20) for n in range(6)]
    _write_wds(tmp_path / "a.tar", captions)
    result = _convert(cli, tmp_path / "a.tar", tmp_path / "out", tokenizer_path,
                      "--caption-max-tokens", 8)
    assert result.code == 0, result.err
    stored = _stored(tmp_path / "out")
    assert [s[0] for s in stored] == _own_ids(tokenizer_path, captions, max_tokens=8)
    eos = Tokenizer.from_file(str(tokenizer_path)).token_to_id("<|endoftext|>")
    assert all(s[0][-1] == eos and len(s[0]) <= 8 for s in stored)
    cut = sum(len(ids) > 8 for ids in _own_ids(tokenizer_path, captions))
    assert 0 < cut < len(captions) and f"{cut} captions cut to 8 tokens" in result.out
    with Dataset(tmp_path / "out") as ds:
        assert ds.manifest.stats["captions"]["truncated"] == cut


@pytest.mark.parametrize(("value", "reason"), [
    (None, "no caption: it has no txt;json:caption"),
    (7, "caption txt;json:caption is a number (7), not text"),
    ({"en": "a dog"}, "caption txt;json:caption is an object, not text"),
    ("   ", "empty caption in txt;json:caption"),
])
def test_a_sample_without_a_text_caption_is_one_line_naming_it(
        cli, tokenizer_path: Path, tmp_path: Path, value: object, reason: str) -> None:
    _write_wds(tmp_path / "a.tar", [caption(0), value, caption(2)])
    result = _convert(cli, tmp_path / "a.tar", tmp_path / "out", tokenizer_path, "--strict")
    assert result.code != 0
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and "a.tar:000001" in lines[0] and reason in lines[0], result.err
    listed = _convert(cli, tmp_path / "a.tar", tmp_path / "listed", tokenizer_path)
    assert listed.code == 0 and "2 images of 3 inputs (1 rejected" in listed.out
    reject = json.loads((tmp_path / "listed" / "rejects.jsonl").read_text())
    assert reject["source"] == "a.tar:000001" and reason in reject["reason"]


def test_empty_caption_keep_stores_the_special_tokens_alone(cli, tokenizer_path: Path,
                                                            tmp_path: Path) -> None:
    _write_wds(tmp_path / "a.tar", [caption(0), None, ""])
    assert _convert(cli, tmp_path / "a.tar", tmp_path / "out", tokenizer_path,
                    "--empty-caption", "keep").code == 0
    assert _stored(tmp_path / "out")[1:] == [_own_ids(tokenizer_path, [""])] * 2


def test_a_vocabulary_beyond_the_chosen_id_type_is_refused_in_one_line(
        cli, tokenizer_path: Path, tmp_path: Path) -> None:
    _write_wds(tmp_path / "a.tar", [caption(0)])
    result = _convert(cli, tmp_path / "a.tar", tmp_path / "out", tokenizer_path,
                      "--caption-id-type", "uint8")
    assert result.code != 0
    assert result.err.strip().splitlines() == [
        "datapipe: error: --caption-id-type uint8: the tokenizer's vocabulary has 300 ids, beyond "
        "uint8's largest id 255; use uint16"]
    assert not (tmp_path / "out").exists()


def test_caption_options_without_a_tokenizer_are_refused(cli, tmp_path: Path) -> None:
    _write_wds(tmp_path / "a.tar", [caption(0)])
    result = cli("convert", "images", tmp_path / "a.tar", tmp_path / "out", "--caption-field",
                 "txt")
    assert result.code != 0 and "--caption-field needs --tokenizer" in result.err
