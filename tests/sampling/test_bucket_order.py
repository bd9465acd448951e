"""Bucketed batch orders: every image once per epoch over any number of ranks, each batch one
bucket's size, buckets spread through the epoch, the same global sequence at any world size."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from datapipe.sampling.bucket_order import BucketEpoch, BucketLayout, BucketStream
from datapipe.sampling.elastic import Segment, follow

# Bucket sizes 10, 290, 1 and 699 with batch sizes 4, 8, 16 and 32: a bucket smaller than one
# batch, and last batches that do not fill.
OFFSETS = (0, 10, 300, 301, 1000)
SIZES = (4, 8, 16, 32)


def _layout(drop_last: bool = False, shuffle: bool = True, seed: int = 0) -> BucketLayout:
    ids = np.random.default_rng(5).permutation(1000).astype(np.uint32)
    return BucketLayout(ids, OFFSETS, SIZES, drop_last, seed, shuffle)


def _bucket_of(layout: BucketLayout) -> dict[int, int]:
    return {int(i): k for k in range(4)
            for i in layout.ids[layout.offsets[k]:layout.offsets[k + 1]]}


@pytest.mark.parametrize("world", [1, 2, 3])
def test_every_image_once_per_epoch_across_ranks_each_batch_one_bucket(world: int) -> None:
    layout = _layout()
    bucket_of = _bucket_of(layout)
    plans = [BucketStream(BucketEpoch(layout, 1)).rank_plan(r, world) for r in range(world)]
    assert len({len(p) for p in plans}) == 1  # every rank the same steps
    seen: collections.Counter[int] = collections.Counter()
    for plan in plans:
        for b in range(len(plan)):
            ids, pad = plan.batch(b)
            k = plan.extra(b)["bucket"]
            assert len(ids) == SIZES[k]
            assert {bucket_of[int(i)] for i in ids} == {k}
            seen.update(ids[~pad].tolist())
    assert seen == collections.Counter(range(1000))


def test_a_bucket_smaller_than_a_batch_is_padded_flagged_and_dropped_with_drop_last() -> None:
    epoch = BucketEpoch(_layout(), 0)
    plan = BucketStream(epoch).rank_plan(0, 1)
    batches = [(plan.extra(b)["bucket"], *plan.batch(b)) for b in range(len(plan))]
    lone = [(ids, pad) for k, ids, pad in batches if k == 2]
    assert len(lone) == 1 and int(lone[0][1].sum()) == 15  # one image, 15 repeats of it
    assert set(lone[0][0].tolist()) == {int(_layout().ids[300])}
    dropped = BucketEpoch(_layout(drop_last=True), 0)
    assert 2 not in dropped.buckets.tolist()
    assert dropped.total == 10 // 4 + 290 // 8 + 699 // 32


def test_small_buckets_are_spread_through_the_epoch_in_another_order_each_epoch() -> None:
    layouts = [BucketEpoch(_layout(), e) for e in range(4)]
    orders = set()
    for epoch in layouts:
        plan = BucketStream(epoch).rank_plan(0, 1)
        buckets = [plan.extra(b)["bucket"] for b in range(len(plan))]
        places = [b for b, k in enumerate(buckets) if k == 0]  # bucket 0: 3 batches of 59
        assert places[0] < len(plan) // 2 and places[-1] >= len(plan) // 2
        orders.add(tuple(epoch.buckets.tolist()))
    assert len(orders) > 1


def test_a_resume_at_another_world_size_continues_the_same_global_sequence() -> None:
    epoch = BucketEpoch(_layout(), 2)
    whole = BucketStream(epoch).rank_plan(0, 1)
    reference = [whole.batch(b)[0].tolist() for b in range(len(whole))]
    rest = follow(BucketStream(epoch), (Segment(2, 7),), 2)
    assert rest.drawn == 14
    plans = [rest.rank_plan(r, 3) for r in range(3)]
    got = {plan.global_batch(b): plan.batch(b)[0].tolist()
           for plan in plans for b in range(len(plan)) if not plan.padding(b)}
    assert [got[g] for g in sorted(got)] == reference[14:]
    assert epoch.images_before(epoch.total) == 1000
    assert epoch.images_before(14) == sum(
        len(whole.batch(b)[0]) - int(whole.batch(b)[1].sum()) for b in range(14))


def test_without_shuffle_every_epoch_has_the_same_order() -> None:
    epochs = [BucketEpoch(_layout(shuffle=False), e) for e in range(2)]
    plans = [BucketStream(e).rank_plan(0, 1) for e in epochs]
    assert [p.batch(b)[0].tolist() for b in range(len(plans[0])) for p in plans[:1]] == \
        [plans[1].batch(b)[0].tolist() for b in range(len(plans[1]))]
