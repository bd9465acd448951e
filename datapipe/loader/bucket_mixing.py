"""Aspect-ratio buckets over a mixture of datasets (`Loader([a, b], weights=..., buckets=...)`).

Each source keeps its own bucket index (image/bucket_index.py: beside its shards, memory-mapped
by the node), and the epoch is planned by sampling/bucket_mixture.py: each source's share by the
weights, as an unbucketed mixture takes it, spread over its buckets by their sizes; each batch
one bucket's. The workers build the batches as for one dataset (loader/bucket_batches.py), over
the sources together, and say each sample's `source`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from datapipe.errors import ArgumentError
from datapipe.image.bucket_index import BucketIndex
from datapipe.image.buckets import Buckets
from datapipe.loader.bucket_batches import Bucketing, BucketingBase
from datapipe.loader.image_batches import ImageBatchSpec
from datapipe.loader.mixing import describe
from datapipe.loader.progress_state import LoaderPosition
from datapipe.sampling.bucket_mixture import BucketMixStart, BucketMixture
from datapipe.sampling.elastic import follow
from datapipe.sampling.mixture import Mixture
from datapipe.wording import plural


def make_bucketing(buckets: Buckets, indexes: Sequence[BucketIndex], spec: ImageBatchSpec,
                   loader: Any) -> BucketingBase:
    """One dataset's bucketing, or a mixture's (`loader.mixture` set)."""
    if loader.mixture is None:
        return Bucketing(buckets, indexes[0], spec, loader)
    return MixedBucketing(buckets, indexes, spec, loader)


class MixedBucketing(BucketingBase):
    """A bucketed Loader over a mixture: each epoch's plan, each source's progress."""

    def __init__(self, buckets: Buckets, indexes: Sequence[BucketIndex], spec: ImageBatchSpec,
                 loader: Any) -> None:
        super().__init__(buckets, spec, loader.batch_size)
        self.drop_last = loader.drop_last
        self.names = loader.mixing.sources.names
        self.ids = tuple(index.ids for index in indexes)
        self.counts = tuple(index.summary.counts for index in indexes)
        for name, location, index in zip(self.names, loader.path, indexes, strict=True):
            _check_source(name, location, index, buckets)
        if not self.plan(loader.mixture).start(0).at(loader.world_size).epoch.total:
            warnings.warn(f"{describe(loader.path)}: drop_last=True drops every batch: every "
                          f"bucket holds fewer images than its batch size {self.batch_sizes}",
                          RuntimeWarning, stacklevel=4)

    def plan(self, mixture: Mixture) -> BucketMixture:
        return BucketMixture(mixture, self.ids, self.counts, self.batch_sizes, self.drop_last)

    def start(self, epoch: int, mixture: Mixture | None = None) -> BucketMixStart:
        return self.plan(mixture).start(epoch)  # type: ignore[arg-type]  # a mixture's

    def progress(self, position: LoaderPosition, world_size: int,
                 mixture: Mixture | None = None) -> dict[str, dict[str, int]]:
        """Images each source gave, all ranks together: the epochs before whole (where its
        stream of slots stands), then this epoch's global batches drawn."""
        start = self.start(position.epoch, mixture)
        rest = follow(start, position.segments, position.epoch)
        rest = rest.after(world_size, position.batches_done)
        drawn = rest.epoch.before + rest.epoch.drawn(rest.drawn)  # type: ignore[attr-defined]
        return {name: {"samples": int(n)} for name, n in zip(self.names, drawn, strict=True)}


def _check_source(name: str, location: Any, index: BucketIndex, buckets: Buckets) -> None:
    """A source none of whose images fits a bucket is refused (its every crop would cut more
    than the limit allows: most likely the wrong bucket set); one with some such images is
    counted in a warning, as one dataset is."""
    summary, limit = index.summary, buckets.max_aspect_error
    if summary.count and summary.far == summary.count:
        raise ArgumentError(f"path[{name!r}] ({location}): none of its "
                            f"{plural(summary.count, 'image')} is within max_aspect_error="
                            f"{limit} of a bucket's aspect ratio; "
                            "add buckets of its shapes, raise max_aspect_error, or leave it "
                            "out of the mixture")
    if summary.far:
        warnings.warn(f"path[{name!r}] ({location}): {summary.far} of {summary.count} images "
                      f"are further than max_aspect_error={limit} from every bucket's aspect "
                      f"ratio (worst {summary.worst:.2f}, a log-ratio); each goes to the "
                      "nearest bucket and its crop cuts more", RuntimeWarning, stacklevel=5)
