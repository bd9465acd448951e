"""The region decoder (C extension) gives the same pixels as a full PIL decode."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import datapipe.image.cpu_decode as cpu_decode
from tests.imagegen import jpeg_bytes, noise_image

jpeg = pytest.importorskip("datapipe.image._jpeg")


def _decode_both(data: bytes, h: int, w: int, box: tuple[int, ...], flip: bool,
                 size: int, monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, np.ndarray]:
    fast = np.empty((size, size, 3), np.uint8)
    cpu_decode.decode_into(data, "jpeg", h, w, np.array(box), flip, fast)
    with monkeypatch.context() as m:
        m.setattr(cpu_decode, "decode_region", None)
        slow = np.empty_like(fast)
        cpu_decode.decode_into(data, "jpeg", h, w, np.array(box), flip, slow)
    return fast, slow


def test_full_region_is_a_plain_decode() -> None:
    data = jpeg_bytes(noise_image(123, 77, 1))
    rgb, width, height, left, top = jpeg.decode_region(data, 0, 0, 10_000, 10_000, 1)
    assert (width, height, left, top) == (123, 77, 0, 0)
    reference = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    np.testing.assert_array_equal(np.frombuffer(rgb, np.uint8).reshape(77, 123, 3), reference)


@pytest.mark.parametrize("seed", range(6))
def test_crops_match_the_pil_path_exactly_at_full_scale(seed: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    w, h = int(rng.integers(120, 340)), int(rng.integers(120, 340))
    data = jpeg_bytes(noise_image(w, h, seed))
    cw, ch = int(rng.integers(40, w)), int(rng.integers(40, h))
    box = (int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1)), cw, ch)
    fast, slow = _decode_both(data, h, w, box, bool(seed % 2), 64, monkeypatch)
    if min(cw, ch) < 128:  # no DCT scaling: identical pixels
        np.testing.assert_array_equal(fast, slow)
    else:  # DCT-scaled decode: close, not identical
        assert np.abs(fast.astype(int) - slow).mean() < 6


def test_what_libjpeg_declines_falls_back_to_pil(monkeypatch: pytest.MonkeyPatch) -> None:
    cmyk = io.BytesIO()
    noise_image(64, 48, 3).convert("CMYK").save(cmyk, "JPEG")
    fast, slow = _decode_both(cmyk.getvalue(), 48, 64, (0, 0, 64, 48), False, 32, monkeypatch)
    np.testing.assert_array_equal(fast, slow)
    with pytest.raises(ValueError, match="libjpeg"):
        jpeg.decode_region(b"\xff\xd8 not a jpeg", 0, 0, 8, 8, 1)


def test_truncated_jpeg_is_an_error_not_grey_pixels() -> None:
    data = jpeg_bytes(noise_image(96, 96, 4))
    with pytest.raises(ValueError, match="libjpeg"):
        jpeg.decode_region(data[: len(data) // 2], 0, 0, 96, 96, 1)
