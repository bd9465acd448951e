"""Pure functions on sample indices: epoch order, rank shares, batches."""

from datapipe.sampling.order import EpochPlan, epoch_permutation, rank_share

__all__ = ["EpochPlan", "epoch_permutation", "rank_share"]
