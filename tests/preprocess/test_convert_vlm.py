"""`datapipe convert vlm`: image conversations into ids with one placeholder per image, the
assistant mask and the images, checked against transformers' own chat template rendering."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from datapipe.format.concat import open_dataset
from tests.conftest import convert
from tests.vlm_data import SPECIAL, TEMPLATE, make_llava, make_photo_files, make_tokenizer

IMAGE_ID = SPECIAL.index("<|image_pad|>")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tokenizer(tmp_path_factory.mktemp("tok"))


def _hf_tokenizer(folder: Path):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"),
                                   chat_template=TEMPLATE)


def _as_messages(record: dict) -> list[dict]:
    roles = {"human": "user", "gpt": "assistant", "system": "system"}
    messages = []
    for turn in record["conversations"]:
        pieces = turn["value"].split("<image>")
        items = [{"type": "text", "text": pieces[0]}] if pieces[0] else []
        for piece in pieces[1:]:
            items.append({"type": "image"})
            if piece:
                items.append({"type": "text", "text": piece})
        messages.append({"role": roles[turn["from"]], "content": items})
    return messages


def test_llava_json_is_stored_as_the_template_renders_it(tmp_path: Path, tokenizer: Path):
    src = make_llava(tmp_path / "src", count=30)
    convert("vlm", src, tmp_path / "out", "--tokenizer", tokenizer, "--workers", "2")
    records = json.loads(src.read_text())
    hf = _hf_tokenizer(tokenizer)
    with open_dataset(tmp_path / "out") as ds:
        assert len(ds) == 30
        assert ds.manifest.settings["image_token_id"] == IMAGE_ID
        for i, record in enumerate(records):
            row = ds[i]
            out = hf.apply_chat_template(_as_messages(record), tokenize=True, return_dict=True,
                                         return_assistant_tokens_mask=True)
            assert row["tokens"].tolist() == out["input_ids"]
            assert row["loss_mask"].tolist() == out["assistant_masks"]
            images = record.get("image", [])
            images = [images] if isinstance(images, str) else images
            assert row["num_images"] == len(images)
            assert row["image_positions"].tolist() == \
                np.flatnonzero(row["tokens"] == IMAGE_ID).tolist()
            sizes = [Image.open(src.parent / name).size[::-1] for name in images]
            assert row["image_sizes"].reshape(-1, 2).tolist() == [list(s) for s in sizes]
            assert row["image_nbytes"].sum() == len(row["images"])


def test_messages_and_images_jsonl_and_parquet_equal_llava(tmp_path: Path, tokenizer: Path):
    src = make_llava(tmp_path / "src", count=12)
    records = json.loads(src.read_text())
    lines, rows = [], []
    for record in records:
        images = record.get("image", [])
        images = [images] if isinstance(images, str) else images
        lines.append({"messages": _as_messages(record), "images": images})
        rows.append({"messages": json.dumps(_as_messages(record)),
                     "images": [{"bytes": (src.parent / n).read_bytes(), "path": n}
                                for n in images]})
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "data.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    convert("vlm", src, tmp_path / "llava", "--tokenizer", tokenizer)
    convert("vlm", tmp_path / "hf" / "data.jsonl", tmp_path / "jsonl", "--tokenizer", tokenizer,
            "--image-folder", src.parent)
    table = pa.table({"messages": [json.loads(r["messages"]) for r in rows],
                      "images": [r["images"] for r in rows]})
    pq.write_table(table, tmp_path / "hf" / "data.parquet")
    convert("vlm", tmp_path / "hf" / "data.parquet", tmp_path / "parquet", "--tokenizer",
            tokenizer)
    with open_dataset(tmp_path / "llava") as a, open_dataset(tmp_path / "jsonl") as b, \
            open_dataset(tmp_path / "parquet") as c:
        assert len(a) == len(b) == len(c) == 12
        for i in range(12):
            for other in (b, c):
                x, y = a[i], other[i]
                for name in ("tokens", "loss_mask", "image_positions", "image_sizes", "images"):
                    assert np.array_equal(x[name], y[name]), (i, name)


def test_bad_samples_are_rejects_that_name_sample_and_file(tmp_path: Path, tokenizer: Path,
                                                           cli):
    names = make_photo_files(tmp_path / "src", [(40, 30), (30, 40)])
    (tmp_path / "src" / "broken.jpg").write_bytes(b"not a jpeg")
    good = {"image": names[0], "conversations": [
        {"from": "human", "value": "<image>\nwhat is this"}, {"from": "gpt", "value": "a cat"}]}
    records = [
        good,
        {**good, "image": [names[0], names[1]]},  # two images, one placeholder
        {**good, "image": "missing.jpg"},
        {**good, "image": "broken.jpg"},
        {"image": names[1], "conversations": good["conversations"][:1]},  # no assistant turn
        {"conversations": [{"from": "robot", "value": "hi"}]},
        {"conversations": [{"from": "human", "value": "hello"},
                           {"from": "gpt", "value": "a text-only sample"}]},
    ]
    (tmp_path / "src" / "data.json").write_text(json.dumps(records))
    result = cli("convert", "vlm", tmp_path / "src" / "data.json", tmp_path / "out",
                 "--tokenizer", tokenizer)
    assert result.code == 0, result.err
    assert "converted 2 samples of 7 inputs (5 rejected" in result.out
    rejects = [json.loads(line) for line in (tmp_path / "out" / "rejects.jsonl").open()]
    reasons = {r["source"].rsplit(":", 1)[1]: r["reason"] for r in rejects}
    assert reasons["2"] == "1 image placeholder for 2 images"
    assert "missing.jpg" in reasons["3"] and "unreadable" in reasons["3"]
    assert "broken.jpg" in reasons["4"]
    assert reasons["5"] == "no assistant turn (nothing for the loss to count)"
    assert "unknown 'from' 'robot'" in reasons["6"]
    with open_dataset(tmp_path / "out") as ds:
        assert [ds[i]["num_images"] for i in range(2)] == [1, 0]


def test_a_tokenizer_or_template_without_the_image_token_is_refused(tmp_path: Path,
                                                                    tokenizer: Path, cli):
    src = make_llava(tmp_path / "src", count=3)
    plain = make_tokenizer(tmp_path / "plain", special=SPECIAL[:3])
    result = cli("convert", "vlm", src, tmp_path / "out", "--tokenizer", plain)
    assert result.code != 0
    assert "--image-token '<|image_pad|>'" in result.err and "no such token" in result.err
    assert len(result.err.strip().splitlines()) == 1
    template = tmp_path / "text_only.jinja"
    template.write_text(TEMPLATE.replace("<|image_pad|>", ""))
    result = cli("convert", "vlm", src, tmp_path / "out", "--tokenizer", tokenizer,
                 "--chat-template", template)
    assert result.code != 0
    assert "does not render an image item as '<|image_pad|>'" in result.err


def test_a_saved_processor_folder_is_a_tokenizer(tmp_path: Path, tokenizer: Path):
    """A processor's folder as save_pretrained leaves it: tokenizer.json, the image
    processor's config, and the chat template in chat_template.jinja."""
    from transformers import PreTrainedTokenizerFast, Qwen2VLImageProcessor

    folder = tmp_path / "processor"
    PreTrainedTokenizerFast(tokenizer_file=str(tokenizer / "tokenizer.json")) \
        .save_pretrained(folder)
    Qwen2VLImageProcessor().save_pretrained(folder)
    (folder / "chat_template.jinja").write_text(TEMPLATE)
    src = make_llava(tmp_path / "src", count=4)
    convert("vlm", src, tmp_path / "out", "--tokenizer", folder)
    convert("vlm", src, tmp_path / "ref", "--tokenizer", tokenizer)
    with open_dataset(tmp_path / "out") as a, open_dataset(tmp_path / "ref") as b:
        assert [a[i]["tokens"].tolist() for i in range(4)] == \
            [b[i]["tokens"].tolist() for i in range(4)]
