"""datapipe: keep the accelerator fed.

Offline, `datapipe convert` turns raw images and text into shards, and `DatasetWriter` writes
them from your own samples; online, the loaders read them fast; the profiler says where the
time goes.
"""

from __future__ import annotations

import importlib
from typing import Any

from datapipe.errors import ArgumentError, DataError, DatapipeError
from datapipe.format import Dataset, Manifest
from datapipe.pass_hooks import set_pass_wrapper

__version__ = "0.1.0"

# These load on first use: the loaders need torch, whose import costs more than a second, and
# `datapipe convert` and friends never need it; the writer needs what writing needs.
_LAZY = {"Loader": "datapipe.loader", "PatchLoader": "datapipe.loader",
         "VLMLoader": "datapipe.loader",
         "TokenLoader": "datapipe.loader",
         "WorkerError": "datapipe.loader", "DatasetWriter": "datapipe.format.dataset_writer",
         "merge_parts": "datapipe.format.parts", "Captions": "datapipe.loader.caption_fields",
         "PerSample": "datapipe.image.steps", "PerBatch": "datapipe.image.steps",
         "SampleStep": "datapipe.image.steps", "BatchStep": "datapipe.image.steps",
         **dict.fromkeys(("RandAugment", "TrivialAugmentWide", "AutoAugment", "RandomErasing",
                          "Mixup"), "datapipe.image.augment"),
         "image": "datapipe.image", "cli": "datapipe.cli", "profile": "datapipe.profiling"}


def _profiled_pass(loader: Any) -> Any:
    """A loader's pass through the process-wide profiler when `datapipe profile` runs the
    script (DATAPIPE_PROFILE is set); None otherwise, and the loader iterates on its own."""
    from datapipe.profiling.auto import auto_profiler

    profiler = auto_profiler()
    return profiler.wrap(loader) if profiler is not None else None


set_pass_wrapper(_profiled_pass)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(_LAZY[name])
        if name == "profile":  # the function of datapipe.profiling
            return module.profile
        return module if module.__name__ == f"datapipe.{name}" else getattr(module, name)
    raise AttributeError(f"module 'datapipe' has no attribute {name!r}")


__all__ = ["ArgumentError", "AutoAugment", "BatchStep", "Captions", "DataError", "DatapipeError",
           "Dataset", "DatasetWriter", "Loader", "Manifest", "Mixup", "PatchLoader", "PerBatch",
           "PerSample",
           "RandAugment", "RandomErasing", "SampleStep", "TokenLoader", "TrivialAugmentWide",
           "VLMLoader", "WorkerError", "__version__", "cli", "image", "merge_parts", "profile"]
