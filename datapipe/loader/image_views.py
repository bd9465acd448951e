"""A Loader's views of an image: the pipeline of each (`views=`), its output size, and each
view's images in a batch buffer; the check that a dataset is one of images."""

from __future__ import annotations

import torch

from datapipe.errors import ArgumentError, DataError
from datapipe.format.concat import ConcatDataset
from datapipe.format.dataset import Dataset
from datapipe.image.normalize import TORCH_DTYPES
from datapipe.image.placement import ViewSpec
from datapipe.image.transforms import Pipeline, Transform, as_pipeline
from datapipe.loader.base import refuse_empty


def view_pipelines(transform: Transform | None,
                    views: tuple[Transform, ...] | None) -> list[Pipeline]:
    if views is None:
        return [as_pipeline(transform)]
    if transform is not None:
        raise ArgumentError("give transform= or views=, not both: with views, each view's "
                            "transform is the whole pipeline for that view")
    if isinstance(views, Transform) or not isinstance(views, tuple | list) or not views:
        raise ArgumentError(f"views must be a tuple of one or more transforms (one per view), "
                            f"got {views!r}")
    return [as_pipeline(view) for view in views]


def view_of(slot: torch.Tensor, view: ViewSpec, offset: int, n: int) -> torch.Tensor:
    """A view's images in the worker's buffer, in the dtype the workers wrote: no copy (the
    buffer is not reused while the batch lives). NCHW shape, channels-last memory."""
    h, w = view.out_size
    dtype = TORCH_DTYPES.get(view.pixel_dtype, torch.uint8)
    images = slot[offset: offset + view.nbytes(n)].view(dtype).view(n, h, w, 3)
    return images.permute(0, 3, 1, 2)


def output_size(ds: Dataset | ConcatDataset, pipeline: Pipeline) -> tuple[int, int]:
    """The size a view's images come out at: its crop's, else the stored size, which must then
    be one size."""
    if pipeline.output_size:
        return pipeline.output_size
    parts = ds.sources if isinstance(ds, ConcatDataset) else [ds]
    sizes = {(part.scalar_range("height"), part.scalar_range("width")) for part in parts}
    (height, width), *others = sizes
    if others or height[0] != height[1] or width[0] != width[1]:
        raise ArgumentError(f"{ds.directory}: stored images differ in size; give a "
                            "transform that crops to one size (RandomResizedCrop, CenterCrop), "
                            "or buckets= (dp.image.Buckets) to keep each image's aspect ratio")
    return (int(height[0]), int(width[0])) if height[0] is not None else (1, 1)


def check_image_dataset(ds: Dataset) -> None:
    if ds.manifest.kind != "images":
        raise DataError(f"{ds.directory}: a {ds.manifest.kind} dataset; Loader reads images "
                        "(use TokenLoader for text)")
    refuse_empty(ds)
