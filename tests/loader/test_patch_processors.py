"""PatchLoader's presets against the image processors themselves (transformers' PIL backends,
offline): for the same stored image, the same shapes, dtypes, grids and masks, and pixels
within a stated PSNR.

The tolerance, and why: the processor is fed PIL's full-scale decode of the stored JPEG and
resizes with PIL (bicubic for Qwen2-VL, bilinear for SigLIP2); the loader decodes with
libjpeg-turbo at a reduced DCT scale when it shrinks an image 2x or more, and resizes with its
antialiased bilinear filter. On photos that leaves every image at >= 35 dB (Qwen2-VL: bicubic
against bilinear; the worst is a 13 x 9 image blown up 4x) and >= 38 dB (SigLIP2: the same
filter, the DCT-scaled decode the difference), measured in 0-255 pixel units; the median is
above 40 dB for both. A wrong patch order, channel order, mean or std is far below these.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import datapipe as dp
from tests.loader.patch_data import SIZES, make_patch_dataset, stored_image

transformers = pytest.importorskip("transformers")
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (  # noqa: E402
    Qwen2VLImageProcessorPil,
)
from transformers.models.siglip2.image_processing_pil_siglip2 import (  # noqa: E402
    Siglip2ImageProcessorPil,
)

QWEN_MIN_DB, SIGLIP_MIN_DB, MEDIAN_DB = 35.0, 38.0, 40.0


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_patch_dataset(tmp_path_factory.mktemp("patch_photos"))


def psnr(ours: np.ndarray, theirs: np.ndarray, std: np.ndarray) -> float:
    """PSNR in 0-255 pixel units of two normalised patch arrays (`std`: each value's)."""
    mse = float(np.mean(((ours.astype(np.float64) - theirs) * std * 255.0) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def test_qwen2_vl_preset_equals_the_processor(photos: Path) -> None:
    processor = Qwen2VLImageProcessorPil()
    std = np.repeat(processor.image_std, 2 * 14 * 14)  # (channel, frame, row, column)
    seen, scores = set(), []
    with dp.PatchLoader(photos, "qwen2_vl", max_patches=16384, shuffle=False) as loader:
        for batch in loader:
            cu = batch["cu_seqlens"].tolist()
            assert batch["cu_seqlens"].dtype == torch.int32
            assert cu[-1] == len(batch["pixel_values"]) <= 16384
            assert batch["image_grid_thw"].dtype == torch.int64
            for j, index in enumerate(batch["index"].tolist()):
                ref = processor(stored_image(photos, index), return_tensors="np")
                ours = batch["pixel_values"][cu[j]:cu[j + 1]].numpy()
                assert ours.dtype == ref["pixel_values"].dtype == np.float32
                assert ours.shape == ref["pixel_values"].shape, SIZES[index]
                assert batch["image_grid_thw"][j].tolist() == ref["image_grid_thw"][0].tolist()
                score = psnr(ours, ref["pixel_values"], std)
                assert score >= QWEN_MIN_DB, f"image {index} {SIZES[index]}: {score:.1f} dB"
                scores.append(score)
                seen.add(index)
    assert seen == set(range(len(SIZES)))
    assert np.median(scores) >= MEDIAN_DB


def test_siglip2_preset_equals_the_processor(photos: Path) -> None:
    processor = Siglip2ImageProcessorPil()
    std = np.tile(processor.image_std, 16 * 16)  # (row, column, channel)
    seen, scores = set(), []
    with dp.PatchLoader(photos, "siglip2", batch_size=5, shuffle=False) as loader:
        for batch in loader:
            assert batch["pixel_values"].shape[1:] == (256, 768)
            for j, index in enumerate(batch["index"].tolist()):
                ref = processor(stored_image(photos, index), return_tensors="np")
                ours = batch["pixel_values"][j].numpy()
                assert ours.dtype == ref["pixel_values"].dtype == np.float32
                assert ours.shape == ref["pixel_values"][0].shape
                mask = batch["pixel_attention_mask"][j].numpy()
                assert mask.dtype == ref["pixel_attention_mask"].dtype
                assert np.array_equal(mask, ref["pixel_attention_mask"][0])
                assert batch["spatial_shapes"][j].tolist() == ref["spatial_shapes"][0].tolist()
                assert not ours[mask == 0].any(), "padding rows are zero, as the processor's"
                score = psnr(ours, ref["pixel_values"][0], std)
                assert score >= SIGLIP_MIN_DB, f"image {index} {SIZES[index]}: {score:.1f} dB"
                scores.append(score)
                seen.add(index)
    assert seen == set(range(len(SIZES)))
    assert np.median(scores) >= MEDIAN_DB


@pytest.mark.parametrize("max_num_patches", [64, 1024])
def test_siglip2_grids_follow_max_num_patches(photos: Path, max_num_patches: int) -> None:
    processor = Siglip2ImageProcessorPil(max_num_patches=max_num_patches)
    with dp.PatchLoader(photos, "siglip2", batch_size=len(SIZES), shuffle=False,
                        max_num_patches=max_num_patches) as loader:
        batch = next(iter(loader))
    assert batch["pixel_values"].shape == (len(SIZES), max_num_patches, 768)
    for j, index in enumerate(batch["index"].tolist()):
        ref = processor(stored_image(photos, index), return_tensors="np")
        assert batch["spatial_shapes"][j].tolist() == ref["spatial_shapes"][0].tolist()
