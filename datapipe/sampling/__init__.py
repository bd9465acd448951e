"""Pure functions on sample indices: epoch order, rank shares, batches."""

from datapipe.sampling.order import (
    ArrayOrder,
    EpochOrder,
    EpochPlan,
    KeyedOrder,
    SampleRemainder,
    epoch_permutation,
)

__all__ = ["ArrayOrder", "EpochOrder", "EpochPlan", "KeyedOrder", "SampleRemainder",
           "epoch_permutation"]
