from __future__ import annotations

import numpy as np
import pytest

from datapipe.sampling import EpochPlan, epoch_permutation, rank_share


def test_permutation_is_a_pure_function_of_seed_and_epoch() -> None:
    a = epoch_permutation(1000, seed=1, epoch=3, shuffle=True)
    assert np.array_equal(a, epoch_permutation(1000, seed=1, epoch=3, shuffle=True))
    assert not np.array_equal(a, epoch_permutation(1000, seed=1, epoch=4, shuffle=True))
    assert sorted(a.tolist()) == list(range(1000))
    assert np.array_equal(epoch_permutation(5, 0, 0, shuffle=False), np.arange(5))


@pytest.mark.parametrize("n, world", [(10, 1), (10, 2), (10, 3), (7, 3), (2, 3), (0, 2)])
def test_rank_shares_are_equal_and_cover_the_data_once(n: int, world: int) -> None:
    order = epoch_permutation(n, 0, 0, shuffle=True)
    shares = [rank_share(order, r, world) for r in range(world)]
    assert len({len(idx) for idx, _ in shares}) == 1, "equal steps on every rank"
    real = np.concatenate([idx[~pad] for idx, pad in shares]) if n else np.array([])
    assert sorted(real.tolist()) == list(range(n))


def test_batches_are_sorted_within_and_cover_the_share() -> None:
    plan = EpochPlan.build(103, seed=0, epoch=0, shuffle=True, rank=0, world_size=1,
                           batch_size=10, drop_last=False)
    assert len(plan) == 11
    seen = []
    for b in range(len(plan)):
        idx, _ = plan.batch(b)
        assert np.all(np.diff(idx) > 0), "reads grouped: ascending within a batch"
        seen.extend(idx.tolist())
    assert sorted(seen) == list(range(103))
    dropped = EpochPlan.build(103, seed=0, epoch=0, shuffle=True, rank=0, world_size=1,
                              batch_size=10, drop_last=True)
    assert len(dropped) == 10
