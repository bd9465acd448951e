"""Target grids and patch layouts, against the transformers functions they stand for: Qwen2-VL's
`smart_resize` and SigLIP2's `get_image_size_for_max_num_patches` on thousands of sizes (ties
of the rounding included), the processors' own patchify, and the C pass equal to NumPy's."""

from __future__ import annotations

import numpy as np
import pytest

from datapipe.image import patch_producer
from datapipe.image.patch_geometry import GridGeometry, NaFlexGeometry, TargetMemo
from datapipe.image.patch_producer import PatchProducer, PatchSpec
from datapipe.image.patchify import patch_coordinates, patchify_into

pytest.importorskip("transformers")
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
    Qwen2VLImageProcessorPil,
    smart_resize,
)
from transformers.models.siglip2.image_processing_pil_siglip2 import (
    convert_image_to_patches,
    get_image_size_for_max_num_patches,
)


def sizes(count: int) -> tuple[np.ndarray, np.ndarray]:
    """Random sizes, plus sides at exact halves of 28 (ties: round() goes to even) and tiny
    ones."""
    rng = np.random.default_rng(3)
    ties = 14 + 28 * np.arange(1, 40)
    heights = np.concatenate([rng.integers(1, 4000, count), ties, np.arange(1, 40)])
    widths = np.concatenate([rng.integers(1, 4000, count), ties[::-1], np.arange(40, 1, -1)])
    return heights, widths


@pytest.mark.parametrize("limits", [(56 * 56, 28 * 28 * 1280), (28 * 28, 200_000)])
def test_grid_geometry_is_smart_resize(limits: tuple[int, int]) -> None:
    heights, widths = sizes(3000)
    geometry = GridGeometry(min_pixels=limits[0], max_pixels=limits[1])
    got = np.stack(geometry.target_sizes(heights, widths), axis=1)
    checked = 0
    for (h, w), ours in zip(zip(heights.tolist(), widths.tolist(), strict=True), got.tolist(),
                            strict=True):
        if max(h, w) / min(h, w) > 200:  # the processor raises; the loader places it
            assert ours[0] * ours[1] <= limits[1] and min(ours) >= 28
            continue
        assert tuple(ours) == smart_resize(h, w, 28, *limits), (h, w)
        checked += 1
    assert checked > 2900


@pytest.mark.parametrize("max_num_patches", [64, 256, 1024])
def test_naflex_geometry_is_the_processors_bisection(max_num_patches: int) -> None:
    heights, widths = sizes(600)
    got = np.stack(NaFlexGeometry(16, max_num_patches).target_sizes(heights, widths), axis=1)
    for h, w, ours in zip(heights.tolist(), widths.tolist(), got.tolist(), strict=True):
        assert tuple(ours) == get_image_size_for_max_num_patches(h, w, 16, max_num_patches)


@pytest.mark.parametrize("geometry", [NaFlexGeometry(), GridGeometry()])
def test_remembered_targets_are_the_geometrys(geometry: object) -> None:
    """Batches that repeat sizes, mix new ones in and overflow the memo give what the geometry
    computes each time."""
    heights, widths = sizes(300)
    memo = TargetMemo(geometry, limit=100)
    rng = np.random.default_rng(5)
    for _ in range(40):
        pick = rng.integers(0, len(heights), int(rng.integers(0, 64)))
        got = memo.target_sizes(heights[pick], widths[pick])
        want = geometry.target_sizes(heights[pick], widths[pick])
        for g, w in zip(got, want, strict=True):
            assert g.dtype == np.int64
            np.testing.assert_array_equal(g, w)
        assert len(memo.known) <= 100


def test_patch_layouts_are_the_processors() -> None:
    image = np.random.default_rng(0).standard_normal((112, 168, 3)).astype(np.float32)
    expected, rows, cols = Qwen2VLImageProcessorPil().patchify(image.transpose(2, 0, 1), 14,
                                                                2, 2)
    out = np.empty_like(expected)
    patchify_into(image, out, 14, 2, 2, "cthw")
    assert np.array_equal(out, expected)
    coordinates = patch_coordinates(rows, cols, 2)
    assert coordinates[:4].tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert sorted(map(tuple, coordinates.tolist())) == [(r, c) for r in range(rows)
                                                         for c in range(cols)]
    crop = image[:112, :160]
    expected = convert_image_to_patches(np.ascontiguousarray(crop.transpose(2, 0, 1)), 16)
    out = np.empty_like(expected)
    patchify_into(np.ascontiguousarray(crop), out, 16)
    assert np.array_equal(out, expected)


@pytest.mark.skipif(patch_producer._patchify_c is None, reason="C extension not built")
@pytest.mark.parametrize(("geometry", "layout"), [(GridGeometry(), "cthw"),
                                                  (NaFlexGeometry(), "hwc"),
                                                  (GridGeometry(8, 1, 1), "hwc")])
def test_the_c_pass_equals_numpy(geometry: object, layout: str,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    producer = PatchProducer(PatchSpec(geometry, layout, (0.4, 0.5, 0.6), (0.2, 0.3, 0.25)))
    image = np.random.default_rng(1).integers(0, 256, (112, 224, 3), dtype=np.uint8)
    patches = (112 // geometry.patch_size) * (224 // geometry.patch_size)
    fast, slow = (np.empty((patches, geometry.patch_dim), np.float32) for _ in range(2))
    producer.patchify(image, fast)
    monkeypatch.setattr(patch_producer, "_patchify_c", None)
    producer.patchify(image, slow)
    assert np.array_equal(fast, slow)
