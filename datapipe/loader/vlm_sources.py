"""What VLMLoader reads of its dataset, or of each dataset of a mixture, before it plans:
checked, and each sample's length with its images expanded (vlm_lengths.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from datapipe.errors import DataError
from datapipe.format.concat import ConcatDataset, open_dataset
from datapipe.image.patch_geometry import GridGeometry
from datapipe.loader.base import refuse_empty
from datapipe.loader.progress_state import manifest_fingerprint
from datapipe.loader.vlm_lengths import expanded_lengths


@dataclass(frozen=True)
class VLMSources:
    lengths: list[np.ndarray]  # per source, per sample: tokens with its images expanded
    fingerprint: Any  # the manifest's (a mixture's: by source name)

    @property
    def combined(self) -> np.ndarray:
        """Every sample's length, in combined order (a mixture's sources one after another)."""
        return self.lengths[0] if len(self.lengths) == 1 else np.concatenate(self.lengths)


def read_sources(path: Any, mixing: Any, verify: str, geometry: GridGeometry) -> VLMSources:
    """The dataset (or a mixture's datasets: text datasets of one tokenizer, image
    conversations or plain SFT), checked, with their expanded lengths."""
    with open_dataset(path, verify=verify) as ds:
        parts = ds.sources if isinstance(ds, ConcatDataset) else [ds]
        if mixing:
            mixing.check(parts, "text")
        for part in parts:
            if part.manifest.kind != "text":
                raise DataError(f"{part.directory}: a {part.manifest.kind} dataset; VLMLoader "
                                "reads what `datapipe convert vlm` (or convert text) makes")
            refuse_empty(part)
            if verify == "open":
                part.check_hashes()  # here, before workers fork: each shard hashed once
        lengths = [expanded_lengths(part, geometry) for part in parts]
        fingerprint = mixing.fingerprints(parts) if mixing else \
            manifest_fingerprint(ds.manifest)
        return VLMSources(lengths, fingerprint)
