"""Pure functions on sample indices: epoch order, rank shares, batches."""

from datapipe.sampling.order import (
    ArrayOrder,
    EpochOrder,
    EpochPlan,
    KeyedOrder,
    SampleRemainder,
)

__all__ = ["ArrayOrder", "EpochOrder", "EpochPlan", "KeyedOrder", "SampleRemainder"]
