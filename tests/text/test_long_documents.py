"""Documents longer than max_seq_len: split (targets kept across the cut), truncated or dropped
(counted); resume stays exact."""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import datapipe as dp
from datapipe.errors import ArgumentError
from tests.loader.helpers import check_resume_at_every_step
from tests.text.helpers import write_documents

LENGTHS = [10, 70, 5, 130, 24, 64, 3, 41]
CAP = 32


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[np.ndarray]]:
    path = tmp_path_factory.mktemp("long") / "docs"
    return path, write_documents(path, LENGTHS, vocab=1000)


def sequences(batch: dict) -> list[tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(document, segment start, ids, labels, positions) of each real sequence of a packed or
    fixed batch (index has -1 for the padding sequences: the rows' free tails)."""
    flat = {k: v.flatten() for k, v in batch.items() if isinstance(v, torch.Tensor)}
    real = flat.get("attention_mask", torch.ones_like(flat["input_ids"])).bool()
    documents = batch["index"].tolist()
    out = []
    for j, (a, b) in enumerate(itertools.pairwise(batch["cu_seqlens"].tolist())):
        if b > a and real[a]:
            out.append((documents[j], int(flat["segment_start"][j]), flat["input_ids"][a:b],
                        flat["labels"][a:b], flat["position_ids"][a:b]))
    return out


@pytest.mark.parametrize("layout", ["packed", "fixed"])
def test_split_pieces_keep_the_target_across_the_cut(corpus, layout: str) -> None:
    path, documents = corpus
    options = {"layout": layout, "seq_len": 64} if layout == "fixed" else {}
    with dp.TokenLoader(path, max_tokens=128, max_seq_len=CAP, overflow="split",
                        continue_positions=True, add_fields=("segment_start",), shuffle=False,
                        **options) as loader:
        batches = list(loader)
    seen = {d: [] for d in range(len(LENGTHS))}
    for batch in batches:
        for doc, s, ids, labels, pos in sequences(batch):
            whole = documents[doc].astype(np.int64)
            assert len(ids) <= CAP and ids.tolist() == whole[s:s + len(ids)].tolist()
            expected = np.append(whole[s + 1:s + len(ids) + 1], [-100] * len(ids))[:len(ids)]
            assert labels.tolist() == expected.tolist(), "the last target is the next token"
            assert pos.tolist() == list(range(s, s + len(ids))), "positions continue"
            seen[doc].append((s, len(ids)))
    for doc, pieces in seen.items():
        assert sum(n for _, n in sorted(pieces)) == LENGTHS[doc]


def test_truncate_keeps_each_documents_first_tokens_even_padded(corpus) -> None:
    path, documents = corpus
    with pytest.warns(RuntimeWarning, match=r"overflow='truncate' leaves out 0 documents and "
                                            r"(\d+) tokens"):
        loader = dp.TokenLoader(path, max_tokens=128, layout="padded", max_seq_len=CAP,
                                overflow="truncate", shuffle=False)
    with loader:
        batches = list(loader)
        assert loader.tokens_dropped == sum(max(0, n - CAP) for n in LENGTHS)
    for batch in batches:
        for row, doc in enumerate(batch["index"].tolist()):
            n = min(LENGTHS[doc], CAP)
            assert batch["input_ids"][row, :n].tolist() == documents[doc][:n].tolist()
            assert batch["labels"][row, n - 1] == -100, "a truncated document ends there"


def test_drop_leaves_long_documents_out_and_counts_them(corpus) -> None:
    path, _ = corpus
    with pytest.warns(RuntimeWarning, match="leaves out 4 documents and 305 tokens"):
        loader = dp.TokenLoader(path, max_tokens=128, max_seq_len=CAP, overflow="drop")
    with loader:
        docs = sorted(i for b in loader for i in b["index"].tolist() if i >= 0)
        assert (loader.documents_dropped, loader.tokens_dropped) == (4, 305)
    assert docs == [d for d, n in enumerate(LENGTHS) if n <= CAP]


def test_no_warning_when_nothing_is_left_out(corpus) -> None:
    path, _ = corpus
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dp.TokenLoader(path, max_tokens=256, max_seq_len=256, overflow="drop").close()


@pytest.mark.parametrize("overflow", ["split", "drop"])
def test_resume_with_a_cap_is_exact(corpus, overflow: str) -> None:
    path, _ = corpus
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        check_resume_at_every_step(lambda: dp.TokenLoader(
            path, max_tokens=48, max_seq_len=CAP, overflow=overflow, seed=3), epoch=1)


def test_caps_that_cannot_hold_are_refused(corpus) -> None:
    path, _ = corpus
    cases = [({"max_tokens": 64, "max_seq_len": 65}, r"max_seq_len=65 is more than one batch "
              r"holds \(max_tokens=64\)"),
             ({"max_tokens": 256, "layout": "fixed", "seq_len": 32, "max_seq_len": 40},
              r"\(seq_len=32\)"),
             ({"max_tokens": 56, "layout": "padded", "max_seq_len": 50,
               "pad_to_multiple_of": 16, "overflow": "drop"}, "max_seq_len=50 is more"),
             ({"max_tokens": 256, "layout": "padded", "overflow": "split"},
              "layout='padded' never splits a document"),
             ({"max_tokens": 256, "layout": "padded", "max_seq_len": 64},
              "layout='padded' never splits"),
             ({"max_tokens": 256, "overflow": "wrap"}, "overflow must be one of"),
             ({"max_tokens": 256, "max_seq_len": 0}, "max_seq_len must be >= 1"),
             ({"batch_size": 4, "overflow": "drop"}, "needs max_seq_len")]
    for options, message in cases:
        with pytest.raises(ArgumentError, match=message):
            dp.TokenLoader(path, **options)


def test_padded_refusal_of_a_long_document_names_overflow_and_the_option_works(corpus) -> None:
    """The message names what to pass; passing it (without max_seq_len, with rows padded to a
    multiple that max_tokens is not) gives batches within the budget."""
    path, documents = corpus
    with pytest.raises(ArgumentError, match=r"document 3 has 130 tokens \(136 padded to a "
                                            r"multiple of 8\), more than max_tokens=100 in "
                                            r"layout='padded'; pass overflow='truncate'") as info:
        dp.TokenLoader(path, max_tokens=100, layout="padded", pad_to_multiple_of=8)
    assert "overflow='drop'" in str(info.value) and "\n" not in str(info.value)
    for overflow in ("truncate", "drop"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            loader = dp.TokenLoader(path, max_tokens=100, layout="padded", pad_to_multiple_of=8,
                                    overflow=overflow, shuffle=False)
        with loader:
            batches = list(loader)
        assert all(b["input_ids"].numel() <= 100 for b in batches)
        kept = sorted(d for b in batches for d in b["index"].tolist())
        assert kept == [d for d, n in enumerate(LENGTHS) if overflow == "truncate" or n <= 96]
        for batch in batches:  # a truncated document is its first 96 tokens
            for row, doc in enumerate(batch["index"].tolist()):
                n = min(LENGTHS[doc], 96)
                assert batch["input_ids"][row, :n].tolist() == documents[doc][:n].tolist()
