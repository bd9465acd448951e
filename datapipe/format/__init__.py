"""The shard format: the one place that knows the bytes on disk (see docs/FORMAT.md)."""

from datapipe.format.dataset import Dataset
from datapipe.format.manifest import FORMAT_VERSION, MANIFEST_NAME, Manifest, ShardInfo
from datapipe.format.schema import Column, token_type_for_vocab
from datapipe.format.shard_formats import open_shard
from datapipe.format.shard_reader import ShardReader
from datapipe.format.writer import ShardSetWriter, shard_name

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "Column",
    "Dataset",
    "Manifest",
    "ShardInfo",
    "ShardReader",
    "ShardSetWriter",
    "open_shard",
    "shard_name",
    "token_type_for_vocab",
]
