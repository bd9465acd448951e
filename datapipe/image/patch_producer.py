"""One stored image to the patches a native-resolution model reads, written where asked.

The target size comes from the stored size (patch_geometry.py), so the decoder goes straight
there on the crop-first path (`decode_whole_into`: the whole image as the box, at a reduced DCT
scale when it is at least twice the target) into a uint8 scratch image; the C extension then reads
each byte once and writes its normalised float (the mean/std table) to its places in the
model's patch order (without it: the table, then NumPy's strided copy, ~3x slower). Nothing
here knows batches: a loader that packs a conversation's text tokens and its images' patches
into one sequence calls `PatchProducer.produce` per image just as the patch loader does. A
loader's per-image augmentation (patch_steps.py) runs between the decode and the patchify.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.image.cpu_decode import decode_whole_into
from datapipe.image.normalize import normalize_table
from datapipe.image.patch_geometry import Geometry
from datapipe.image.patchify import PATCH_LAYOUTS, patch_coordinates, patchify_into
from datapipe.image.pixel_map import apply_table
from datapipe.image.transforms import Normalize

try:  # the optional C extension (setup.py); NumPy does the same, slower, without it
    from datapipe.image._patches import patchify_into as _patchify_c
except ImportError:
    _patchify_c = None


MAX_GRIDS_KEPT = 1024  # distinct grids whose patch coordinates a producer keeps


@dataclass(frozen=True)
class PatchSpec:
    """How an image becomes patches: its geometry, the patch layout, the model's mean/std."""

    geometry: Geometry
    layout: str  # "cthw" (Qwen2-VL) or "hwc" (SigLIP2, NaViT): see patchify.py
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]

    def __post_init__(self) -> None:
        if self.layout not in PATCH_LAYOUTS:
            raise ArgumentError(f"patch layout must be one of {PATCH_LAYOUTS}, got "
                                f"{self.layout!r}")
        Normalize(self.image_mean, self.image_std)  # checks them, naming a bad value

    @property
    def patch_dim(self) -> int:
        return self.geometry.patch_dim


class PatchProducer:
    """Makes one image's patches at a time into caller-given rows (a worker keeps one)."""

    def __init__(self, spec: PatchSpec) -> None:
        self.spec = spec
        self.table = normalize_table(Normalize(spec.image_mean, spec.image_std))
        self._scratch = np.empty(0, dtype=np.uint8)
        # Grids repeat (a few dozen shapes per epoch for SigLIP2): made once each, read-only.
        self._coordinates: dict[tuple[int, int], np.ndarray] = {}

    def _image(self, height: int, width: int) -> np.ndarray:
        """A uint8 (height, width, 3) scratch image, grown only when a larger one comes."""
        size = height * width * 3
        if self._scratch.size < size:
            self._scratch = np.empty(size, dtype=np.uint8)
        return self._scratch[:size].reshape(height, width, 3)

    def produce(self, payload: bytes, encoding: str, stored: tuple[int, int],
                target: tuple[int, int], flip: bool, out: np.ndarray,
                steps: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        """Decode `payload` (stored (height, width)), resize to `target`, flip if asked, run
        `steps` on the uint8 image (they keep its size), normalise, and write its patches into
        `out` ((patches, patch_dim) float32)."""
        image = self._image(*target)
        decode_whole_into(payload, encoding, stored[0], stored[1], flip, image)
        self.patchify(image if steps is None else steps(image), out)

    def patchify(self, image: np.ndarray, out: np.ndarray) -> None:
        """A decoded uint8 image (H, W, 3) at its target size into `out`, normalised."""
        g = self.spec.geometry
        if _patchify_c is not None:
            _patchify_c(image, image.shape[0], image.shape[1], self.table, out, g.patch_size,
                        g.merge_size, g.temporal_patch_size, self.spec.layout == "cthw")
            return
        normalised = np.empty(image.shape, dtype=np.float32)
        apply_table(image, self.table, normalised)
        patchify_into(normalised, out, g.patch_size, g.merge_size, g.temporal_patch_size,
                      self.spec.layout)

    def coordinates(self, rows: int, cols: int) -> np.ndarray:
        """(row, column) of each patch `produce` writes for a grid of rows x cols (read-only:
        the same array serves every image of that grid)."""
        made = self._coordinates.get((rows, cols))
        if made is None:
            if len(self._coordinates) >= MAX_GRIDS_KEPT:
                self._coordinates.clear()
            made = patch_coordinates(rows, cols, self.spec.geometry.merge_size)
            made.flags.writeable = False
            self._coordinates[(rows, cols)] = made
        return made
