"""The fields each preset adds, the supervised loss mask, num_loss_tokens, index alignment,
shuffle=False and the arguments TokenLoader refuses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import datapipe as dp
from datapipe.errors import ArgumentError, DataError
from tests.text.helpers import write_documents

LENGTHS = [9, 30, 4, 17, 25, 11, 2, 40, 13, 21, 6, 33]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[np.ndarray]]:
    path = tmp_path_factory.mktemp("fields") / "docs"
    return path, write_documents(path, LENGTHS)


def test_without_options_the_keys_are_as_before(corpus) -> None:
    path, _ = corpus
    with dp.TokenLoader(path, max_tokens=64) as loader:
        batch = next(iter(loader))
    assert set(batch) == {"input_ids", "labels", "position_ids", "cu_seqlens", "max_seqlen",
                          "num_real_tokens", "num_loss_tokens", "efficiency", "index",
                          "is_padding"}
    assert batch["input_ids"].dim() == 1


def test_varlen_preset_has_torchs_names(corpus) -> None:
    path, _ = corpus
    with dp.TokenLoader(path, max_tokens=64, preset="varlen") as loader:
        for batch in loader:
            assert batch["cu_seq_q"] is batch["cu_seqlens"] and batch["cu_seq_k"].dtype == \
                torch.int32
            assert batch["max_q"] == batch["max_k"] == batch["max_seqlen"]
            assert batch["input_ids"].dim() == 1


def test_flex_preset_seq_idx_numbers_the_sequences(corpus) -> None:
    path, _ = corpus
    with dp.TokenLoader(path, max_tokens=64, preset="flex", pad_to_multiple_of=8) as loader:
        for batch in loader:
            seq_idx, cu = batch["seq_idx"], batch["cu_seqlens"].long()
            assert seq_idx.shape == batch["input_ids"].shape == (1, int(cu[-1]))
            assert seq_idx.dtype == torch.int32
            expected = torch.repeat_interleave(torch.arange(len(cu) - 1), torch.diff(cu))
            assert torch.equal(seq_idx[0].long(), expected)


def test_megatron_preset_rows_with_a_loss_mask(corpus) -> None:
    path, _ = corpus
    with dp.TokenLoader(path, max_tokens=128, seq_len=32, preset="megatron") as loader:
        for batch in loader:
            assert batch["input_ids"].shape[1] == 32 and batch["seq_idx"].shape[1] == 32
            assert torch.equal(batch["loss_mask"], (batch["labels"] != -100).float())
            assert batch["num_loss_tokens"] == int(batch["loss_mask"].sum())


def test_index_is_one_per_sequence_of_cu_seqlens(corpus) -> None:
    """With pad_to_multiple_of the packed batch ends with a padding sequence: index has -1
    for it (it once was one entry short of cu_seqlens)."""
    path, _ = corpus
    tails = 0
    with dp.TokenLoader(path, max_tokens=50, pad_to_multiple_of=8) as loader:
        for batch in loader:
            index, lengths = batch["index"], torch.diff(batch["cu_seqlens"])
            assert len(index) == len(lengths)
            padding = torch.repeat_interleave(index < 0, lengths)
            assert len(batch["input_ids"][~padding]) == batch["num_real_tokens"]
            assert (index[:-1] >= 0).all()
            tails += int((index < 0).sum())
    assert tails > 0


def test_fixed_index_has_an_entry_per_sequence_of_cu_seqlens(corpus) -> None:
    """Fixed rows: index is aligned with cu_seqlens and seq_idx, the documents (pieces) in row
    order and -1 for each row's free tail."""
    path, documents = corpus
    tails = 0
    with dp.TokenLoader(path, max_tokens=128, layout="fixed", seq_len=32,
                        add_fields=("seq_idx",)) as loader:
        for batch in loader:
            cu, index = batch["cu_seqlens"].numpy(), batch["index"].numpy()
            assert len(index) == len(cu) - 1 == int(batch["seq_idx"].max()) + 1
            ids = batch["input_ids"].view(-1).numpy()
            for k, doc in enumerate(index.tolist()):
                piece = ids[cu[k]:cu[k + 1]]
                if doc < 0:  # a row's tail: padding up to the row's end
                    tails += 1
                    assert cu[k + 1] % 32 == 0 and not batch["attention_mask"].view(-1)[
                        cu[k]:cu[k + 1]].any()
                else:
                    assert any(np.array_equal(piece, documents[doc][a:a + len(piece)])
                               for a in range(len(documents[doc]) - len(piece) + 1))
    assert tails > 0


@pytest.mark.parametrize("options", [{"max_tokens": 64}, {"max_tokens": 128, "layout": "padded"},
                                     {"max_tokens": 128, "layout": "fixed", "seq_len": 64}])
def test_shuffle_false_keeps_document_order(corpus, options: dict) -> None:
    path, _ = corpus
    with dp.TokenLoader(path, shuffle=False, **options) as loader:
        order = [i for b in loader for i in b["index"].tolist() if i >= 0]
    assert order == sorted(order) and sorted(set(order)) == list(range(len(LENGTHS)))


def test_shuffle_false_padded_batches_keep_their_limits(corpus) -> None:
    path, _ = corpus
    with dp.TokenLoader(path, max_tokens=128, layout="padded", shuffle=False,
                        pad_to_multiple_of=8, batch_multiple_of=2, batch_size=3) as loader:
        for batch in loader:
            rows, width = batch["input_ids"].shape
            assert rows * width <= 128 and rows <= 3 and (rows == 2 or rows == 1)


def test_loss_mask_column_masks_the_targets(tmp_path: Path) -> None:
    """A supervised dataset: 1 where the loss counts the prediction of that token."""
    lengths = [8, 5, 12]
    masks = [np.array([0, 0, 0, 1, 1, 1, 0, 1], np.uint8), np.array([0, 1, 1, 1, 1], np.uint8),
             np.array([0] * 6 + [1] * 6, np.uint8)]
    documents = write_documents(tmp_path / "sft", lengths, loss_masks=masks)
    for labels, workers in (("shifted", 0), ("hf", 1)):
        with dp.TokenLoader(tmp_path / "sft", max_tokens=64, shuffle=False, labels=labels,
                            num_workers=workers, add_fields=("shift_labels",)) as loader:
            batch = next(iter(loader))
        assert "loss_mask" not in batch  # the column is applied, not handed out
        shifted, hf = [], []
        for doc, mask in zip(documents, masks, strict=True):
            ids = doc.astype(np.int64)
            nxt = np.append(ids[1:], -100).astype(np.int64)
            keep = np.append(mask[1:], 0).astype(bool)
            shifted += np.where(keep, nxt, -100).tolist()
            first = np.arange(len(ids)) == 0
            hf += np.where(mask.astype(bool) & ~first, ids, -100).tolist()
        assert batch["shift_labels"].tolist() == shifted
        assert batch["labels"].tolist() == (shifted if labels == "shifted" else hf)
        assert batch["num_loss_tokens"] == sum(int(m[1:].sum()) for m in masks) == 14


def test_presets_and_explicit_settings_that_disagree_are_refused(corpus) -> None:
    path, _ = corpus
    cases = [({"preset": "hf", "labels": "shifted"}, r"preset='hf' sets labels='hf'.*"
              r"labels='shifted'"),
             ({"preset": "hf", "layout": "padded"}, "preset='hf' sets layout='packed'"),
             ({"preset": "varlen", "batch_dim": True}, "preset='varlen' sets batch_dim=False"),
             ({"preset": "llama"}, "preset must be one of"),
             ({"add_fields": ("seq_id",)}, "add_fields: no field 'seq_id'"),
             ({"layout": "padded", "add_fields": ("seq_idx",)}, "one document per row"),
             ({"layout": "padded", "batch_dim": True}, "batch_dim=True shapes packed"),
             ({"labels": "unshifted"}, "labels must be one of")]
    for options, message in cases:
        with pytest.raises(ArgumentError, match=message):
            dp.TokenLoader(path, max_tokens=256, seq_len=64, **options)
    # what a preset sets, given again with the same value, is no conflict
    dp.TokenLoader(path, max_tokens=256, preset="hf", labels="hf", layout="packed").close()


def test_fields_can_name_an_optional_field(corpus) -> None:
    path, _ = corpus
    with dp.TokenLoader(path, max_tokens=64, fields=("input_ids", "seq_idx")) as loader:
        ids, seq_idx = next(iter(loader))
    assert ids.shape == seq_idx.shape


def test_a_loss_mask_that_does_not_fit_is_refused(tmp_path: Path) -> None:
    ids = [np.arange(6), np.arange(4)]
    with dp.DatasetWriter(tmp_path / "short", {"tokens": "uint16[]",
                                               "loss_mask": "uint8[]"}) as writer:
        writer.write({"tokens": ids[0], "loss_mask": np.ones(6, np.uint8)})
        writer.write({"tokens": ids[1], "loss_mask": np.ones(3, np.uint8)})
    with dp.TokenLoader(tmp_path / "short", max_tokens=64, num_workers=1) as loader, \
            pytest.raises(DataError, match=r"row 1.*has 3 loss_mask values for 4 tokens"):
        list(loader)
    with dp.DatasetWriter(tmp_path / "wide", {"tokens": "uint16[]",
                                              "loss_mask": "int32[]"}) as writer:
        writer.write({"tokens": ids[0], "loss_mask": np.ones(6, np.int32)})
    with pytest.raises(DataError, match=r"column 'loss_mask' is int32\[\]; a loss mask is uint8"):
        dp.TokenLoader(tmp_path / "wide", max_tokens=64)


def test_msgpack_shards_give_the_same_masked_split_batches(tmp_path: Path) -> None:
    """msgpack keeps no offsets: documents and masks are read record by record there."""
    rng = np.random.default_rng(4)
    lengths = [int(n) for n in rng.integers(1, 90, 30)]
    masks = [rng.integers(0, 2, n).astype(np.uint8) for n in lengths]

    def batches(shard_format: str) -> list[dict]:
        write_documents(tmp_path / shard_format, lengths, loss_masks=masks,
                        shard_format=shard_format)
        with dp.TokenLoader(tmp_path / shard_format, max_tokens=100, max_seq_len=40,
                            add_fields=("shift_labels", "segment_start"), seed=2) as loader:
            return list(loader)

    arrow, msgpack = batches("arrow"), batches("msgpack")
    assert len(arrow) == len(msgpack)
    for a, m in zip(arrow, msgpack, strict=True):
        assert all(torch.equal(a[k], m[k]) for k in ("input_ids", "labels", "segment_start"))
        assert a["num_loss_tokens"] == m["num_loss_tokens"]
        assert a["num_loss_tokens"] == int((a["labels"] != -100).sum())
    assert any((b["segment_start"] > 0).any() for b in arrow), "documents were split"
