"""The overflow policy's counts and kept lengths, taken a chunk at a time and per lookup, equal
the same policy applied to the whole array at once."""

from __future__ import annotations

import numpy as np
import pytest

from datapipe.loader.token_plans import largest_total
from datapipe.sampling import overflow as overflow_module
from datapipe.sampling.overflow import KeptLengths, Overflow

LENGTHS = np.random.default_rng(7).integers(1, 400, size=10_001).astype(np.int64)


def whole_array(policy: Overflow, lengths: np.ndarray) -> tuple[np.ndarray, int, int]:
    """(kept lengths, documents dropped, tokens dropped), the policy on every length at once."""
    over = lengths > policy.cap
    if policy.mode == "truncate":
        return np.minimum(lengths, policy.cap), 0, int((lengths[over] - policy.cap).sum())
    if policy.mode == "drop":
        return np.where(over, 0, lengths), int(over.sum()), int(lengths[over].sum())
    return lengths, 0, 0


@pytest.mark.parametrize("mode", ["split", "truncate", "drop"])
def test_chunked_counts_and_lazy_lengths_equal_the_whole_array(
        mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(overflow_module, "_CHUNK", 999)  # many chunks, a ragged last one
    policy = Overflow(250, mode)
    kept, documents, tokens = whole_array(policy, LENGTHS)
    assert policy.dropped(LENGTHS) == (documents, tokens)
    lazy = policy.kept_lengths(LENGTHS)
    assert isinstance(lazy, KeptLengths) == (mode != "split")
    assert len(lazy) == len(LENGTHS)
    assert lazy.sum(dtype=np.int64) == int(kept.sum())
    picks = np.random.default_rng(1).integers(0, len(LENGTHS), size=500)
    np.testing.assert_array_equal(lazy[picks], kept[picks])
    np.testing.assert_array_equal(lazy[10:2_000], kept[10:2_000])
    assert int(lazy[17]) == int(kept[17])


@pytest.mark.parametrize("k", [1, 5, 64, 20_000])
def test_largest_total_equals_a_sort(k: int) -> None:
    columns = [LENGTHS[:3_000], LENGTHS[3_000:], np.zeros(0, dtype=np.int64)]
    want = int(np.sort(LENGTHS)[::-1][:k].sum())
    assert largest_total(columns, k, chunk=777) == want
