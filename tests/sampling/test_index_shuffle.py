"""IndexShuffle: a permutation for every n, a pure function of its key, and as good as a shuffle
where a plan can see it (where each sample lands, what follows what)."""

from __future__ import annotations

import numpy as np
import pytest

from datapipe.errors import ArgumentError
from datapipe.sampling.index_shuffle import MAX_SIZE, IndexShuffle

SIZES = sorted({1, 2, 3, 5, 7, 10, 99, 1001, *(2**k + d for k in range(2, 17, 3)
                                               for d in (-1, 0, 1)), 10**6 + 3})


@pytest.mark.parametrize("n", SIZES)
def test_every_size_is_a_permutation(n: int) -> None:
    out = IndexShuffle(n, [7, n])(np.arange(n))
    assert out.dtype == np.int64
    assert np.array_equal(np.bincount(out, minlength=n), np.ones(n, dtype=np.int64))


def test_positions_are_answered_one_at_a_time_as_in_bulk() -> None:
    shuffle = IndexShuffle(1000, [1, 2])
    whole = shuffle(np.arange(1000))
    picked = np.array([999, 0, 517, 3, 3])
    assert np.array_equal(shuffle(picked), whole[picked])
    assert np.array_equal(IndexShuffle(1000, [1, 2])(picked), whole[picked]), "a pure function"
    assert shuffle(np.arange(0)).shape == (0,)


def test_different_keys_give_different_orders() -> None:
    keys = [[0], [1], [0, 0], [0, 1], [1, 0], [5, 3, 0x5EED], [5, 4, 0x5EED]]
    orders = {tuple(IndexShuffle(1000, key)(np.arange(1000)).tolist()) for key in keys}
    assert len(orders) == len(keys)
    assert tuple(range(1000)) not in orders


@pytest.mark.parametrize("n", [5, 10, 17])
def test_each_element_lands_uniformly_over_keys(n: int) -> None:
    """Pearson's chi-square of (element, position) counts over many keys: (n - 1)**2 degrees of
    freedom, so a true shuffle stays within a few standard deviations of that; a shuffle that
    favours some places for some elements (too few rounds, a bad mix) is far out."""
    keys = 100 * n
    counts = np.zeros((n, n), dtype=np.int64)
    for key in range(keys):
        counts[IndexShuffle(n, [key, 99])(np.arange(n)), np.arange(n)] += 1
    expected = keys / n
    chi2 = ((counts - expected) ** 2 / expected).sum()
    dof = (n - 1) ** 2
    assert abs(chi2 - dof) < 6 * np.sqrt(2 * dof), (chi2, dof)


@pytest.mark.parametrize("n", [2**20, 10**6 + 3, 3 * 10**9])
def test_neighbouring_positions_are_not_correlated(n: int) -> None:
    """Neighbouring positions (what one batch takes) land independently: no correlation of an
    index with the next one's or with its position, and no short steps between neighbours."""
    positions = np.arange(200_000, dtype=np.int64) + n // 3
    out = IndexShuffle(n, [3, 1, 0x5EED])(positions).astype(np.float64)
    bound = 5 / np.sqrt(len(out))
    assert abs(np.corrcoef(out[:-1], out[1:])[0, 1]) < bound
    assert abs(np.corrcoef(positions, out)[0, 1]) < bound
    # |a - b| of two independent uniform draws is below n / 100 with probability ~2%.
    close = np.mean(np.abs(np.diff(out)) < n / 100)
    assert abs(close - 0.0199) < 0.003, close


@pytest.mark.parametrize("n", [4**8, 10**5])
def test_where_two_positions_land_is_unrelated_across_keys(n: int) -> None:
    """Over keys, the indices of two fixed positions (their xor, their distance) take as many
    values as independent draws would: a permutation with linear structure (a Feistel round
    without its mixing function) keeps one of them fixed for every key."""
    keys = 300
    pairs = np.array([IndexShuffle(n, [key, 5])(np.array([0, 1])) for key in range(keys)])
    # 300 draws of ~n values collide a few times at most (~keys**2 / 2n expected).
    assert len(set((pairs[:, 0] ^ pairs[:, 1]).tolist())) > keys - 8
    assert len(set((pairs[:, 0] - pairs[:, 1]).tolist())) > keys - 8


def test_sizes_past_int64_places_are_refused() -> None:
    with pytest.raises(ArgumentError, match="at most 2\\*\\*62"):
        IndexShuffle(MAX_SIZE + 1, [0])
    with pytest.raises(ArgumentError):
        IndexShuffle(-1, [0])
    biggest = IndexShuffle(MAX_SIZE, [0])(np.array([0, MAX_SIZE - 1]))
    assert np.all((biggest >= 0) & (biggest < MAX_SIZE))
    with pytest.raises(IndexError):
        IndexShuffle(10, [0])(np.array([10]))

