"""Loaders: shards in, batches out, with parallel workers, prefetch and exact resume."""

from datapipe.loader.image_loader import Loader
from datapipe.loader.patch_loader import PatchLoader
from datapipe.loader.token_loader import TokenLoader
from datapipe.loader.vlm_loader import VLMLoader
from datapipe.loader.workers import WorkerError

__all__ = ["Loader", "PatchLoader", "TokenLoader", "VLMLoader", "WorkerError"]
