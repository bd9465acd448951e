"""A token batch's ids: the one-shard gather (one numpy take) against the per-segment loop, on
pieces cut anywhere in their documents."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from datapipe.loader.token_batches import TokenBatchBuilder
from tests.text.helpers import write_documents


def _segments(lengths: list[int], rng: np.random.Generator,
              count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`count` random pieces (document, start, end), whole documents and cut ones."""
    docs = rng.integers(0, len(lengths), count)
    start = np.array([rng.integers(0, lengths[d]) for d in docs])
    end = np.array([rng.integers(s + 1, lengths[d] + 1) for d, s in zip(docs, start, strict=True)])
    return docs, start, end


@pytest.mark.parametrize("shard_size", ["256MB", "2KB"])
def test_both_gathers_copy_each_piece_of_its_document(tmp_path: Path, shard_size: str) -> None:
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 300, 200).tolist()
    out = tmp_path / "corpus"
    documents = write_documents(out, lengths, vocab=60_000, shard_size=shard_size)
    builder = TokenBatchBuilder(str(out))
    for _ in range(20):
        docs, start, end = _segments(lengths, rng, 40)
        shards, rows = builder.dataset.locate_many(docs)
        expected = np.concatenate([documents[d][s:e] for d, s, e in zip(docs, start, end,
                                                                           strict=True)])
        looped = np.zeros(len(expected) + 5, np.uint16)
        assert builder._gather_each(looped, shards, rows, start, end) == len(expected)
        np.testing.assert_array_equal(looped[:len(expected)], expected)
        taken = np.zeros_like(looped)
        count = builder._gather_one_shard(taken, shards, rows, start, end)
        if shard_size == "256MB":
            assert count == len(expected)
            np.testing.assert_array_equal(taken, looped)
        else:
            assert len(np.unique(shards)) > 1 and count is None
