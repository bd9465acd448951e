"""Normalize's table: the batch op's own arithmetic on every byte value, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import datapipe as dp
from datapipe.image.batch_ops import BatchTransforms
from datapipe.image.normalize import NUMPY_DTYPES, normalize_table


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_table_holds_what_the_batch_op_computes(dtype: str) -> None:
    step = dp.image.Normalize(mean=(0.5, 0.25, 0.125), std=(0.2, 0.3, 0.7), dtype=dtype)
    table = normalize_table(step)
    assert table.shape == (3, 256) and table.dtype == NUMPY_DTYPES[dtype]
    levels = torch.arange(256, dtype=torch.uint8).repeat(3, 1).view(1, 3, 1, 256)
    expected = BatchTransforms((step,), seed=0)(levels, 0, 0).reshape(3, 256)
    if dtype == "bfloat16":  # the table holds the bit patterns
        expected = expected.view(torch.int16)
    np.testing.assert_array_equal(table.view(expected.numpy().dtype), expected.numpy())


def test_bfloat16_bits_round_to_nearest_even() -> None:
    step = dp.image.Normalize(mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), dtype="bfloat16")
    bits = normalize_table(step).astype(np.uint32) << 16
    values = bits.view(np.float32)
    exact = np.arange(256, dtype=np.float32) / np.float32(255.0)
    # Each value is the bfloat16 nearest to v / 255: within half a unit in the last place.
    ulp = np.float32(2.0) ** (np.floor(np.log2(np.maximum(exact, 1e-30))) - 7)
    assert np.all(np.abs(values[0] - exact) <= ulp / 2)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("in_c", [True, False])
def test_apply_table_maps_every_byte_as_the_table_says(dtype: str, in_c: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The pass that normalises pixels a step changed after decode: the extension's map, or a
    channel at a time without it, both exactly the table."""
    from datapipe.image import pixel_map

    if in_c and pixel_map._map_into is None:
        pytest.skip("the C extension is not built")
    if not in_c:
        monkeypatch.setattr(pixel_map, "_map_into", None)
    table = normalize_table(dp.image.Normalize(dtype=dtype))
    pixels = np.random.default_rng(0).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    pixels[0, :3] = [[0, 0, 0], [255, 255, 255], [1, 128, 254]]
    out = np.empty(pixels.shape, table.dtype)
    pixel_map.apply_table(pixels, table, out)
    assert np.array_equal(out, table[np.arange(3), pixels])
