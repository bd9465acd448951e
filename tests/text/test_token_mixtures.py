"""dp.TokenLoader over several token datasets mixed by weight: real written datasets, real
workers; every sequence's ids checked against the document `source` and `index` name."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import datapipe as dp
from datapipe.errors import ArgumentError
from tests.conftest import convert
from tests.loader.helpers import check_resume_at_every_step, run_world
from tests.text.helpers import write_documents

NAMES = ("web", "code", "books")
WEIGHTS = {"web": 0.6, "code": 0.3, "books": 0.1}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Three sources of 400, 150 and 20 documents of 5-60 tokens, and their ids."""
    root = tmp_path_factory.mktemp("token-mix")
    rng = np.random.default_rng(7)
    docs = {}
    for s, (name, n) in enumerate(zip(NAMES, (400, 150, 20), strict=True)):
        docs[name] = write_documents(root / name, rng.integers(5, 60, n).tolist(), seed=s)
    (root / "text.txt").write_text("one two\nthree\n")
    convert("text", root / "text.txt", root / "bytes", "--tokenizer", "bytes")
    return {"paths": {n: root / n for n in NAMES}, "docs": docs, "bytes": root / "bytes",
            "root": root}


def loader(corpus: dict[str, Any], **kw: Any) -> dp.TokenLoader:
    settings: dict[str, Any] = {"max_tokens": 256, "weights": WEIGHTS}
    settings.update(kw)
    return dp.TokenLoader(corpus["paths"], **settings)


def sequences(batch: dict[str, Any]) -> list[tuple[int, int, int]]:
    """(source, index, tokens) per sequence of a packed batch (not the padding tail)."""
    lengths = np.diff(batch["cu_seqlens"].numpy())
    return [(int(s), int(i), int(n)) for s, i, n in
            zip(batch["source"], batch["index"], lengths, strict=True) if s >= 0]


@pytest.mark.parametrize("layout", [{"pad_to_multiple_of": 8},  # packed, a padding tail
                                    {"layout": "fixed", "seq_len": 64}])  # rows' free tails
def test_each_sequence_holds_the_document_source_and_index_name(
        corpus: dict[str, Any], layout: dict[str, Any]) -> None:
    with loader(corpus, num_workers=2, add_fields=("seq_idx",), **layout) as mixed:
        batches = list(mixed)
    sources = set()
    for batch in batches:
        ids = batch["input_ids"].view(-1).numpy()
        cu = batch["cu_seqlens"].numpy()
        assert len(batch["source"]) == len(batch["index"]) == len(cu) - 1
        assert batch["source"].dtype == batch["index"].dtype
        assert (batch["source"] < 0).tolist() == (batch["index"] < 0).tolist()
        seq_idx = batch["seq_idx"].view(-1).numpy()
        for k, (s, i) in enumerate(zip(batch["source"].tolist(), batch["index"].tolist(),
                                       strict=True)):
            assert (seq_idx[cu[k]:cu[k + 1]] == k).all()
            if s < 0:
                continue
            document = corpus["docs"][NAMES[s]][i]
            piece = ids[cu[k]:cu[k + 1]]
            assert any(np.array_equal(piece, document[a:a + len(piece)])
                       for a in range(len(document) - len(piece) + 1))
            sources.add(s)
    assert sources == {0, 1, 2}
    assert any(len(set(b["source"][b["source"] >= 0].tolist())) > 1 for b in batches), \
        "packed batches hold documents of several sources"
    assert any((b["source"] < 0).any() for b in batches), "no padding sequence was checked"


def test_padded_rows_hold_the_document_source_and_index_name(corpus: dict[str, Any]) -> None:
    with loader(corpus, num_workers=2, layout="padded", pad_to_multiple_of=8) as mixed:
        for batch in mixed:
            assert len(batch["source"]) == len(batch["index"]) == len(batch["input_ids"])
            for row, s, i in zip(batch["input_ids"], batch["source"].tolist(),
                                 batch["index"].tolist(), strict=True):
                document = corpus["docs"][NAMES[s]][i]
                assert np.array_equal(row[:len(document)].numpy(), document)


def test_any_100_consecutive_batches_hold_each_source_within_2_percent(
        corpus: dict[str, Any]) -> None:
    with loader(corpus, epoch_size=120_000, max_tokens=128) as mixed:
        per_batch = np.zeros((len(mixed), 3))
        for b, batch in enumerate(mixed):
            for s, _, n in sequences(batch):
                per_batch[b, s] += n
    assert len(per_batch) >= 300
    windows = np.lib.stride_tricks.sliding_window_view(per_batch, 100, axis=0).sum(axis=2)
    shares = windows / windows.sum(axis=1, keepdims=True)
    assert np.abs(shares - [0.6, 0.3, 0.1]).max() < 0.02


def test_weights_by_documents_and_the_plain_concatenation(corpus: dict[str, Any]) -> None:
    with loader(corpus, weight_by="documents", epoch_size=1000) as mixed:
        counts = Counter(s for b in mixed for s, _, _ in sequences(b))
    assert [counts[0], counts[1], counts[2]] == [600, 300, 100]
    with loader(corpus, weights=None) as plain:  # default: every document once
        drawn = sorted((s, i) for b in plain for s, i, _ in sequences(b))
    assert drawn == [(s, i) for s, n in enumerate((400, 150, 20)) for i in range(n)]


def test_two_runs_with_one_seed_are_identical(corpus: dict[str, Any]) -> None:
    def run(seed: int, workers: int) -> list[list[tuple[int, int, int]]]:
        with loader(corpus, seed=seed, num_workers=workers) as mixed:
            return [sequences(b) for b in mixed]

    assert run(0, 0) == run(0, 2)
    assert run(0, 0) != run(1, 0)


def test_resume_at_every_step_is_exact(corpus: dict[str, Any]) -> None:
    check_resume_at_every_step(lambda: loader(corpus, epoch_size=3000, max_tokens=512),
                               epoch=1)


def test_resume_at_every_step_across_a_phase_boundary(corpus: dict[str, Any]) -> None:
    # 512 tokens a step: the second phase begins 10 steps into the run's tokens, in epoch 0.
    weights = [(0, [6, 3, 1]), (10, [1, 1, 8])]
    check_resume_at_every_step(lambda: loader(corpus, weights=weights, epoch_size=8000,
                                              max_tokens=512))
    with loader(corpus, weights=weights, epoch_size=8000, max_tokens=512) as phased:
        batches = [sequences(b) for b in phased]
    tokens = np.zeros((2, 3))
    for b, batch in enumerate(batches[:9] + batches[12:]):
        for s, _, n in batch:
            tokens[int(b >= 9), s] += n
    shares = tokens / tokens.sum(axis=1, keepdims=True)
    assert np.abs(shares[0] - [0.6, 0.3, 0.1]).max() < 0.05
    assert np.abs(shares[1] - [0.1, 0.1, 0.8]).max() < 0.05


def test_phases_need_a_fixed_budget_per_step(corpus: dict[str, Any]) -> None:
    with pytest.raises(ArgumentError, match="phases by step need a fixed amount of tokens"):
        loader(corpus, max_tokens=None, batch_size=8, layout="padded",
               weights=[(0, [1, 1, 1]), (5, [1, 1, 2])])


def test_elastic_resume_from_2_to_3_ranks_keeps_each_sources_counts(
        corpus: dict[str, Any]) -> None:
    def make(**rank: int) -> dp.TokenLoader:
        return loader(corpus, epoch_size=6000, max_tokens=256, **rank)

    def drawn(ranks: list[list[dict[str, Any]]]) -> Counter:
        return Counter((s, i) for rank in ranks for b in rank if not b["is_padding"]
                       for s, i, _ in sequences(b))

    whole, _ = run_world(make, 2, None)
    head, state = run_world(make, 2, None, steps=3)
    tail, _ = run_world(make, 3, state)
    assert drawn(head) + drawn(tail) == drawn(whole)


def test_progress_counts_documents_and_tokens_per_source(corpus: dict[str, Any]) -> None:
    with loader(corpus, epoch_size=5000) as mixed:
        it = iter(mixed)
        head = [next(it) for _ in range(4)]
        tokens, documents = Counter(), Counter()
        for batch in head:
            for s, _, n in sequences(batch):
                tokens[s] += n
                documents[s] += 1  # no document is split here (max 60 tokens < 256)
        progress = mixed.progress()
        assert progress == {name: {"documents": documents[s], "tokens": tokens[s]}
                            for s, name in enumerate(NAMES)}
        state = mixed.state_dict()
        assert state["progress"] == progress
        assert state["loss_tokens_seen"] == sum(b["num_loss_tokens"] for b in head)
    with loader(corpus, epoch_size=5000) as resumed:
        resumed.load_state_dict(json.loads(json.dumps(state)))
        assert resumed.progress() == progress
        assert resumed.loss_tokens_seen == state["loss_tokens_seen"]


def test_reweight_continues_a_state_with_new_weights_from_its_next_batch(
        corpus: dict[str, Any]) -> None:
    with loader(corpus, epoch_size=8000) as mixed:
        it = iter(mixed)
        head = [sequences(next(it)) for _ in range(5)]
        state = json.loads(json.dumps(mixed.state_dict()))
    with loader(corpus, epoch_size=8000, weights=[1, 1, 8]) as other, \
            pytest.raises(ArgumentError, match="reweight=True"):
        other.load_state_dict(state)
    with loader(corpus, epoch_size=8000, weights=[1, 1, 8], reweight=True) as other:
        other.load_state_dict(state)
        rest = [sequences(b) for b in other]
    assert 20 < len(rest) < 40
    tokens = np.zeros(3)
    for batch in rest:
        for s, _, n in batch:
            tokens[s] += n
    assert np.abs(tokens / tokens.sum() - [0.1, 0.1, 0.8]).max() < 0.05
    with loader(corpus, epoch_size=8000) as again:
        again.load_state_dict(state)
        assert [sequences(b) for b in again][:1] != rest[:1]
    assert head  # the state's batches were the first weights'


def test_datasets_that_cannot_share_a_batch_are_refused(corpus: dict[str, Any],
                                                        tmp_path: Path) -> None:
    paths = corpus["paths"]
    with pytest.raises(ArgumentError, match=r"cannot be mixed: tokenizer"):
        dp.TokenLoader([paths["web"], corpus["bytes"]], max_tokens=256)
    wide = tmp_path / "wide"
    with dp.DatasetWriter(wide, {"tokens": "uint32[]"}) as writer:
        writer.write({"tokens": np.arange(5, dtype=np.uint32)})
    with pytest.raises(ArgumentError, match=r"cannot be mixed: column 'tokens'"):
        dp.TokenLoader([paths["web"], wide], max_tokens=256)
    masked = tmp_path / "masked"
    write_documents(masked, [5, 6], loss_masks=[np.ones(5, np.uint8), np.ones(6, np.uint8)])
    with pytest.raises(ArgumentError, match=r"cannot be mixed: column 'loss_mask'"):
        dp.TokenLoader([paths["web"], masked], max_tokens=256)
    with pytest.raises(ArgumentError, match="weight_by must be one of tokens, documents"):
        loader(corpus, weight_by="bytes")
    with pytest.raises(ArgumentError, match="epoch_size= mixes several datasets"):
        dp.TokenLoader(paths["web"], max_tokens=256, epoch_size=10)


def test_the_profilers_report_lists_what_each_source_gave(corpus: dict[str, Any]) -> None:
    with loader(corpus, epoch_size=5000) as mixed, dp.profile() as prof:
        for _ in prof.wrap(mixed):
            prof.step()
    results = prof.results()
    assert results["sources"] == mixed.progress()
    line = next(x for x in prof.report().splitlines() if "drawn per source" in x)
    named = re.findall(r"(\w+) ([\d.]+)% \(", line)
    assert [name for name, _ in named] == list(NAMES), line
    tokens = np.array([mixed.progress()[name]["tokens"] for name in NAMES])
    assert np.allclose([float(share) for _, share in named], 100 * tokens / tokens.sum(),
                       atol=0.05), line
    # ~90, 45 and 15 documents of 5-60 tokens: the shares by tokens hold in expectation, each
    # within its sampling spread (4 standard deviations).
    assert np.allclose(tokens / tokens.sum(), [0.6, 0.3, 0.1], atol=0.06), line


@pytest.mark.parametrize("overflow", ["truncate", "drop"])
def test_weights_count_the_tokens_the_overflow_policy_keeps(tmp_path: Path,
                                                            overflow: str) -> None:
    """Long documents in one source, short in the other: weighed by their full lengths, the
    capped epoch would hold far less of the long source than its weight."""
    rng = np.random.default_rng(1)
    write_documents(tmp_path / "long", rng.integers(20, 200, 200).tolist())
    write_documents(tmp_path / "short", rng.integers(5, 30, 400).tolist())
    with pytest.warns(RuntimeWarning, match=f"overflow='{overflow}' leaves out"), \
            dp.TokenLoader([tmp_path / "long", tmp_path / "short"], weights=[1, 1],
                           max_tokens=256, max_seq_len=30, overflow=overflow) as capped:
        tokens = np.zeros(2)
        for batch in capped:
            for s, _, n in sequences(batch):
                assert n <= 30
                tokens[s] += n
    assert np.abs(tokens / tokens.sum() - [0.5, 0.5]).max() < 0.01, tokens


def test_a_datasets_own_source_column_gives_way_to_the_mixtures(tmp_path: Path) -> None:
    for name in ("a", "b"):
        with dp.DatasetWriter(tmp_path / name, {"tokens": "uint16[]", "source": "string",
                                                "year": "int32"}) as writer:
            for i in range(4):
                writer.write({"tokens": np.arange(5, dtype=np.uint16), "source": f"web{i}",
                              "year": 2000 + i})
    paths = [tmp_path / "a", tmp_path / "b"]
    with pytest.warns(RuntimeWarning, match="column 'source' is left out"), \
            dp.TokenLoader(paths, max_tokens=64) as mixed:
        batch = next(iter(mixed))
    assert batch["source"].dtype == torch.int64 and "year" in batch
    with pytest.raises(ArgumentError, match="cannot be handed out beside it"):
        dp.TokenLoader(paths, max_tokens=64, extra_columns=("source",))
