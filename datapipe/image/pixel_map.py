"""Pixels through `Normalize`'s table (datapipe.image.normalize.normalize_table) after decode,
for pixels a sample step changed: no torch here, so the converters' decode path can use it."""

from __future__ import annotations

import numpy as np

try:  # the decoder's own output map, in C (an older build of the extension lacks it)
    from datapipe.image._jpeg import map_into as _map_into
except ImportError:
    _map_into = None


def apply_table(pixels: np.ndarray, table: np.ndarray, out: np.ndarray) -> None:
    """H x W x 3 uint8 `pixels` through `normalize_table`'s `table` into `out` (its dtype):
    what the decoder writes when no step comes between it and the Normalize. One pass in C; a
    channel at a time in NumPy without the extension (a 3 x 256 fancy index costs a
    millisecond per 224 x 224 image)."""
    if _map_into is not None and pixels.flags.c_contiguous:
        _map_into(pixels, table, out)
        return
    for channel in range(3):
        out[..., channel] = table[channel][pixels[..., channel]]
