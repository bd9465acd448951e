"""The patch producer's decode (`_jpeg.whole_into`): a YCbCr JPEG's planes resampled as stored
and converted at the output size. Every resampler path gives the same bytes; libjpeg's colour
arithmetic exactly; within a stated PSNR of decoding RGB and resizing it (crop_into)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from tests.imagegen import jpeg_bytes, noise_image, photo_image

jpeg = pytest.importorskip("datapipe.image._jpeg")

SUBSAMPLING = {0: "4:4:4", 1: "4:2:2", 2: "4:2:0"}  # PIL's codes
MIN_PSNR_DB = 45.0  # against decode RGB + resize, on photo-like images (photo_image)


def _rgb_route(data: bytes, w: int, h: int, denom: int, flip: bool,
               size: tuple[int, int]) -> np.ndarray:
    out = np.zeros((*size, 3), np.uint8)
    jpeg.crop_into(data, (0, 0, w, h), denom, (0.0, 0.0, float(w), float(h)), flip, out)
    return out


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


@pytest.mark.parametrize("seed", range(24))
def test_every_path_gives_the_same_bytes_and_stays_near_the_rgb_route(seed: int) -> None:
    """Paths compared on a photo and on noise (saturated colours reach every rounding of the
    colour arithmetic); the photo also against the RGB route."""
    rng = np.random.default_rng(seed)
    w, h = int(rng.integers(9, 400)), int(rng.integers(9, 400))
    sampling = seed % 3
    size = (int(rng.integers(1, 300)), int(rng.integers(1, 300)))
    denom = int(rng.choice([1, 2, 4, 8]) if seed % 4 else 1)
    flip = bool(seed % 2)
    for image in (photo_image(w, h, seed), noise_image(w, h, seed)):
        data = jpeg_bytes(image, subsampling=sampling)
        results = {}
        for path in jpeg.resample_paths():
            results[path] = np.zeros((*size, 3), np.uint8)
            jpeg.whole_into(data, denom, flip, results[path], path=path, size=(w, h))
        for path, pixels in results.items():
            np.testing.assert_array_equal(pixels, results["portable"], err_msg=path)
    data = jpeg_bytes(photo_image(w, h, seed), subsampling=sampling)
    if denom == 1 or min(w / size[1], h / size[0]) >= denom:  # the loader's choice of denom
        rgb = _rgb_route(data, w, h, denom, flip, size)
        ours = np.zeros_like(rgb)
        jpeg.whole_into(data, denom, flip, ours)
        score = psnr(ours, rgb)
        assert score >= MIN_PSNR_DB, f"{w}x{h} {SUBSAMPLING[sampling]} -> {size}: {score:.1f} dB"


def test_at_its_own_size_a_444_jpeg_is_libjpegs_own_decode() -> None:
    """No resampling (weights of exactly 1) leaves the colour conversion alone: libjpeg's. The
    sizes cross the plane transposes' 16 x 16 and 8 x 8 tiles and their byte-wise edges."""
    for w, h, seed in ((123, 77, 1), (64, 64, 2), (17, 300, 3), (33, 16, 4), (16, 15, 5),
                       (250, 190, 6), (7, 9, 7)):
        data = jpeg_bytes(noise_image(w, h, seed), subsampling=0)
        out = np.zeros((h, w, 3), np.uint8)
        jpeg.whole_into(data, 1, False, out)
        np.testing.assert_array_equal(out, np.asarray(Image.open(io.BytesIO(data))))
        jpeg.whole_into(data, 1, True, out)
        np.testing.assert_array_equal(out, np.asarray(Image.open(io.BytesIO(data)))[:, ::-1])


def test_grey_and_cmyk_take_the_rgb_route() -> None:
    cmyk = io.BytesIO()
    noise_image(64, 48, 3).convert("CMYK").save(cmyk, "JPEG")
    grey = jpeg_bytes(noise_image(64, 48, 4, mode="L"))
    for data in (grey, cmyk.getvalue()):
        for size, flip in (((20, 30), False), ((70, 90), True)):
            out = np.zeros((*size, 3), np.uint8)
            try:
                jpeg.whole_into(data, 1, flip, out, size=(64, 48))
            except ValueError:  # libjpeg declines CMYK on both routes; the caller uses PIL
                with pytest.raises(ValueError):
                    _rgb_route(data, 64, 48, 1, flip, size)
                continue
            np.testing.assert_array_equal(out, _rgb_route(data, 64, 48, 1, flip, size))


def test_bad_input_is_a_one_line_error() -> None:
    data = jpeg_bytes(noise_image(96, 80, 5))
    out = np.zeros((16, 16, 3), np.uint8)
    with pytest.raises(ValueError, match="the JPEG is 96x80 pixels, not 96x81"):
        jpeg.whole_into(data, 1, False, out, size=(96, 81))
    with pytest.raises(ValueError, match="libjpeg"):
        jpeg.whole_into(data[: len(data) // 2], 1, False, out)
    with pytest.raises(ValueError, match="libjpeg"):
        jpeg.whole_into(b"\xff\xd8 not a jpeg", 1, False, out)
    with pytest.raises(ValueError, match="scale_denom"):
        jpeg.whole_into(data, 3, False, out)
    with pytest.raises(ValueError, match="H x W x 3"):
        jpeg.whole_into(data, 1, False, np.zeros((16, 16), np.uint8))
