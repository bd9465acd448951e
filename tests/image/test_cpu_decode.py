"""The C extension: region decode gives PIL's pixels; crop-resize is within rounding of PIL."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import datapipe.image.cpu_decode as cpu_decode
from datapipe.errors import DataError
from tests.image.test_whole_into import MIN_PSNR_DB, psnr
from tests.imagegen import jpeg_bytes, noise_image, photo_image

jpeg = pytest.importorskip("datapipe.image._jpeg")


def _decode_both(data: bytes, h: int, w: int, box: tuple[int, ...], flip: bool,
                 size: int, monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, np.ndarray]:
    fast = np.empty((size, size, 3), np.uint8)
    cpu_decode.decode_into(data, "jpeg", h, w, np.array(box), flip, fast)
    with monkeypatch.context() as m:
        m.setattr(cpu_decode, "crop_into", None)
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
def test_crops_match_the_pil_path_within_rounding(seed: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    w, h = int(rng.integers(120, 340)), int(rng.integers(120, 340))
    data = jpeg_bytes(noise_image(w, h, seed))
    cw, ch = int(rng.integers(40, w)), int(rng.integers(40, h))
    box = (int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1)), cw, ch)
    fast, slow = _decode_both(data, h, w, box, bool(seed % 2), 64, monkeypatch)
    difference = np.abs(fast.astype(int) - slow)
    if min(cw, ch) < 128:  # full-scale decode: PIL's pixels, resampled with 16-bit weights
        assert difference.max() <= 1
    else:  # DCT-scaled decode: close, not identical
        assert difference.mean() < 6


def _pil_resize(data: bytes, box: tuple[float, ...], size: tuple[int, int],
                flip: bool) -> np.ndarray:
    image = Image.open(io.BytesIO(data)).convert("RGB")
    resized = image.resize(size, Image.Resampling.BILINEAR, box=box)
    if flip:
        resized = resized.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(resized)


@pytest.mark.parametrize("seed", range(40))
def test_crop_into_is_pil_resize_within_one_level(seed: int) -> None:
    """Any float box, shrinking or enlarging, odd sizes, flipped or not; and every resampler
    path this CPU runs (portable, SSE2, AVX2) gives identical bytes."""
    rng = np.random.default_rng(100 + seed)
    w, h = int(rng.integers(9, 300)), int(rng.integers(9, 300))
    data = jpeg_bytes(noise_image(w, h, seed))
    x0, y0 = rng.uniform(0, w - 4), rng.uniform(0, h - 4)
    box = (x0, y0, rng.uniform(x0 + 2, w), rng.uniform(y0 + 2, h))
    out_w, out_h = int(rng.integers(1, 260)), int(rng.integers(1, 260))
    flip = bool(seed % 2)
    results = {}
    for path in jpeg.resample_paths():
        results[path] = np.zeros((out_h, out_w, 3), np.uint8)
        jpeg.crop_into(data, (0, 0, w, h), 1, box, flip, results[path], path=path)
    for path, pixels in results.items():
        np.testing.assert_array_equal(pixels, results["portable"], err_msg=path)
    reference = _pil_resize(data, box, (out_w, out_h), flip)
    assert np.abs(results["portable"].astype(int) - reference).max() <= 1


@pytest.mark.parametrize("seed", range(6))
def test_crop_into_writes_each_byte_through_the_table(seed: int) -> None:
    """With a table, out[y, x, c] is table[c, byte]: 4-byte and 2-byte items, any path, flip,
    shrinking and enlarging."""
    rng = np.random.default_rng(200 + seed)
    w, h = int(rng.integers(20, 200)), int(rng.integers(20, 200))
    data = jpeg_bytes(noise_image(w, h, seed))
    box = (0.0, 0.0, float(w), float(h))
    out_w, out_h = int(rng.integers(1, 160)), int(rng.integers(1, 160))
    flip = bool(seed % 2)
    tables = [rng.standard_normal((3, 256)).astype(np.float32),
              rng.integers(0, 1 << 16, (3, 256)).astype(np.uint16),
              rng.standard_normal((3, 256)).astype(np.float16)]
    for path in jpeg.resample_paths():
        plain = np.zeros((out_h, out_w, 3), np.uint8)
        jpeg.crop_into(data, (0, 0, w, h), 1, box, flip, plain, path=path)
        for table in tables:
            mapped = np.zeros((out_h, out_w, 3), table.dtype)
            jpeg.crop_into(data, (0, 0, w, h), 1, box, flip, mapped, path=path, table=table)
            np.testing.assert_array_equal(mapped, table[np.arange(3), plain], err_msg=path)


def test_crop_into_refuses_a_table_or_output_that_do_not_match() -> None:
    data = jpeg_bytes(noise_image(32, 32, 6))
    args = (data, (0, 0, 32, 32), 1, (0.0, 0.0, 32.0, 32.0), False)
    with pytest.raises(ValueError, match="3 x 256"):
        jpeg.crop_into(*args, np.zeros((8, 8, 3), np.float32), table=np.zeros(256, np.float32))
    with pytest.raises(ValueError, match="3 x 256"):
        jpeg.crop_into(*args, np.zeros((8, 8, 3), np.float64), table=np.zeros((3, 256)))
    with pytest.raises(ValueError, match="4-byte items"):
        jpeg.crop_into(*args, np.zeros((8, 8, 3), np.uint8),
                       table=np.zeros((3, 256), np.float32))


@pytest.mark.parametrize("with_c", [True, False])
def test_decode_into_with_a_table_on_every_path(with_c: bool,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The C call, PIL's fallback and raw pixels all write table values."""
    table = np.random.default_rng(3).standard_normal((3, 256)).astype(np.float32)
    if not with_c:
        monkeypatch.setattr(cpu_decode, "crop_into", None)
    image = noise_image(48, 40, 9)
    raw = np.asarray(image).tobytes()
    for payload, encoding in ((jpeg_bytes(image), "jpeg"), (raw, "raw")):
        for box, size in (((4, 2, 40, 36), 24), ((0, 0, 48, 40), 40)):
            out_h, out_w = (size, size) if size == 24 else (40, 48)
            plain = np.zeros((out_h, out_w, 3), np.uint8)
            cpu_decode.decode_into(payload, encoding, 40, 48, np.array(box), True, plain)
            mapped = np.zeros((out_h, out_w, 3), np.float32)
            cpu_decode.decode_into(payload, encoding, 40, 48, np.array(box), True, mapped, table)
            np.testing.assert_array_equal(mapped, table[np.arange(3), plain])


def test_crop_into_rejects_an_output_it_cannot_fill() -> None:
    data = jpeg_bytes(noise_image(32, 32, 5))
    for out in (np.zeros((8, 8, 4), np.uint8), np.zeros((8, 8, 3), np.float32),
                np.zeros((8, 16, 3), np.uint8)[:, ::2]):
        with pytest.raises((ValueError, BufferError)):
            jpeg.crop_into(data, (0, 0, 32, 32), 1, (0.0, 0.0, 32.0, 32.0), False, out)
    with pytest.raises(ValueError, match="not available"):
        jpeg.crop_into(data, (0, 0, 32, 32), 1, (0.0, 0.0, 32.0, 32.0), False,
                       np.zeros((8, 8, 3), np.uint8), path="neon")
    with pytest.raises(BufferError, match="not writable"):
        jpeg.crop_into(data, (0, 0, 32, 32), 1, (0.0, 0.0, 32.0, 32.0), False, b"read-only")


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


def test_a_stored_size_that_is_not_the_jpegs_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The crop is planned from the shard's height and width: if they are not the JPEG's, the
    C path refuses before decoding and either path names the two sizes."""
    data = jpeg_bytes(noise_image(64, 48, 6))
    out = np.zeros((16, 16, 3), np.uint8)
    jpeg.crop_into(data, (0, 0, 64, 48), 1, (0.0, 0.0, 64.0, 48.0), False, out, size=(64, 48))
    with pytest.raises(ValueError, match="the JPEG is 64x48 pixels, not 64x304"):
        jpeg.crop_into(data, (0, 0, 64, 48), 1, (0.0, 0.0, 64.0, 48.0), False, out,
                       size=(64, 304))
    for crop_into in (jpeg.crop_into, None):
        monkeypatch.setattr(cpu_decode, "crop_into", crop_into)
        with pytest.raises(DataError, match="is 64x48 pixels, but the shard's width and height "
                                            "say 64x304"):
            cpu_decode.decode_into(data, "jpeg", 304, 64, np.array([0, 200, 64, 48]), False,
                                   out)


@pytest.mark.parametrize("with_c", [True, False])
def test_a_whole_image_decode_is_decode_into_with_the_whole_box(
        with_c: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The patch producer's call: the general path's pixels for JPEGs shrunk (a reduced DCT
    scale) or enlarged, flipped or not, raw pixels, and a JPEG libjpeg declines. The same
    bytes, but for a YCbCr JPEG with the extension (its planes resampled as stored:
    test_whole_into.py), which is within MIN_PSNR_DB."""
    if not with_c:
        monkeypatch.setattr(cpu_decode, "crop_into", None)
    cmyk = io.BytesIO()
    noise_image(64, 48, 3).convert("CMYK").save(cmyk, "JPEG")
    image = photo_image(96, 80, 7)
    payloads = [(jpeg_bytes(image), "jpeg", 80, 96), (np.asarray(image).tobytes(), "raw", 80, 96),
                (cmyk.getvalue(), "jpeg", 48, 64)]
    for payload, encoding, h, w in payloads:
        for size, flip in (((40, 32), False), ((36, 44), True), ((100, 120), True)):
            whole = np.zeros((*size, 3), np.uint8)
            cpu_decode.decode_whole_into(payload, encoding, h, w, flip, whole)
            general = np.zeros_like(whole)
            cpu_decode.decode_into(payload, encoding, h, w, np.array([0, 0, w, h]), flip,
                                   general)
            if with_c and payload is payloads[0][0]:
                assert psnr(whole, general) >= MIN_PSNR_DB
            else:
                np.testing.assert_array_equal(whole, general)
            assert whole.any()
    with pytest.raises(DataError, match="is 96x80 pixels, but the shard's width and height"):
        cpu_decode.decode_whole_into(payloads[0][0], "jpeg", 81, 96, False, whole)
