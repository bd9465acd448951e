"""datapipe: keep the accelerator fed.

Offline, `datapipe convert` turns raw images and text into shards; online, the loaders read
them fast; the profiler says where the time goes.
"""

from datapipe import image
from datapipe.errors import ArgumentError, DataError, DatapipeError
from datapipe.format import Dataset, Manifest
from datapipe.loader import Loader, WorkerError

__version__ = "0.1.0"

__all__ = [
    "ArgumentError",
    "DataError",
    "DatapipeError",
    "Dataset",
    "Loader",
    "Manifest",
    "WorkerError",
    "__version__",
    "image",
]
