"""What `convert images` stores is what the photo looks like: every awkward kind of input against
a Pillow reference (open, exif_transpose, ICC profile -> sRGB, RGB, Lanczos to the short side,
sides rounded to nearest), sizes to the pixel, colour within a delta E bound."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps, features

import datapipe as dp
from datapipe.format import Dataset
from preprocess.image_ops import ImageSettings, prepare_image
from tests.conftest import convert
from tests.preprocess.icc_profiles import (
    SPACES,
    grey_profile,
    lab,
    rgb_profile,
    srgb_encode,
    to_srgb_reference,
)

SHORT = 48
LCMS = features.check("littlecms2")


def scene(width: int, height: int) -> Image.Image:
    """Smooth colour gradients with a dark block in the top-left: any wrong turn shows."""
    y, x = np.mgrid[0:height, 0:width] / max(width, height)
    pixels = np.stack([40 + 180 * x, 60 + 150 * y, 200 - 120 * (x + y) / 2], axis=-1)
    pixels[: height // 3, : width // 4] = (20, 30, 120)
    return Image.fromarray(pixels.astype(np.uint8))


def nearest(width: int, height: int, short: int) -> tuple[int, int]:
    m = min(width, height)
    return math.floor(width * short / m + 0.5), math.floor(height * short / m + 0.5)


def reference(path: Path, short: int = SHORT) -> np.ndarray:
    with Image.open(path) as opened:
        image = ImageOps.exif_transpose(opened)
        if image.mode in ("I;16", "I"):
            image = Image.fromarray(np.rint(np.asarray(image) * (255 / 65535)).astype(np.uint8))
        rgba = image.convert("RGBA")
    flat = Image.new("RGB", rgba.size, (255, 255, 255))
    flat.paste(rgba, mask=rgba.getchannel("A"))
    return np.asarray(flat.resize(nearest(*flat.size, short), Image.Resampling.LANCZOS))


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 10 * math.log10(255 ** 2 / max(mse, 1e-12))


def stored(out: Path) -> dict[str, tuple[np.ndarray, dict]]:
    """path -> (decoded pixels, row) of every sample in OUT."""
    with Dataset(out) as ds:
        rows = [ds[i] for i in range(len(ds))]
        raw = ds.manifest.settings["encoding"] == "raw"
    result = {}
    for row in rows:
        payload = row["image"].tobytes()
        if raw:
            pixels = np.frombuffer(payload, np.uint8).reshape(row["height"], row["width"], 3)
        else:
            pixels = np.asarray(Image.open(io.BytesIO(payload)).convert("RGB"))
        result[row["path"].split("/", 1)[1]] = (pixels, row)
    return result


def rejects(out: Path) -> dict[str, str]:
    lines = (out / "rejects.jsonl").read_text().splitlines()
    return {r["source"].split("/", 1)[1]: r["reason"] for r in map(json.loads, lines)}


def _save(image: Image.Image, path: Path, **options: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, **options)


_UNDO = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
         4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE,
         6: Image.Transpose.ROTATE_90, 7: Image.Transpose.TRANSVERSE,
         8: Image.Transpose.ROTATE_270}  # what a camera held that way stores


def _oriented_jpeg(path: Path, orientation: int) -> None:
    """Stored 120x80, displayed upright (dark block top-left) once its orientation is applied."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    upright = scene(80, 120) if orientation > 4 else scene(120, 80)
    stored_pixels = upright.transpose(_UNDO[orientation]) if orientation > 1 else upright
    _save(stored_pixels, path, quality=95, exif=exif.tobytes())


def _table_inputs(folder: Path) -> list[str]:
    """One file of every kind the table lists; returns the names."""
    for orientation in range(1, 9):
        _oriented_jpeg(folder / f"orient{orientation}.jpg", orientation)
    base = scene(120, 80)
    _save(base.convert("CMYK"), folder / "cmyk.jpg", quality=95)
    _save(base.convert("L"), folder / "grey.jpg", quality=95)
    alpha = Image.fromarray(np.tile(np.linspace(0, 255, 120).astype(np.uint8), (80, 1)))
    _save(Image.merge("LA", (base.convert("L"), alpha)), folder / "grey_alpha.png")
    rgba = base.copy()
    rgba.putalpha(alpha)
    _save(rgba, folder / "rgba.png")
    palette = base.quantize(64)
    _save(palette, folder / "palette_transparent.png", transparency=0)
    _save(base, folder / "progressive.jpg", quality=95, progressive=True)
    _save(base, folder / "bitmap.bmp")
    _save(base, folder / "pixmap.ppm")
    frames = [base.quantize(64), scene(120, 80).rotate(180).quantize(64)]
    frames[0].save(folder / "animated.gif", save_all=True, append_images=frames[1:])
    _save(scene(5000, 300), folder / "wide.jpg", quality=95)
    exif = Image.Exif()
    exif[0x0112] = 6
    _save(base, folder / "exif6.png", exif=exif.tobytes())
    names = sorted(p.name for p in folder.iterdir())
    for fmt, ext in (("webp", "webp"), ("avif", "avif")):
        if features.check(fmt):
            _save(base, folder / f"photo.{ext}", quality=95)
            names.append(f"photo.{ext}")
    if features.check("libtiff"):
        _save(base, folder / "deflate.tif", compression="tiff_adobe_deflate")
        names.append("deflate.tif")
    return names


def test_every_kind_of_input_matches_the_pillow_reference(cli, tmp_path: Path) -> None:
    names = _table_inputs(tmp_path / "src" / "c")
    out = tmp_path / "out"
    result = cli("convert", "images", tmp_path / "src", out, "--short-side", SHORT,
                 "--quality", 95, "--subsampling", "4:4:4", "--workers", 1)
    assert result.code == 0, result.err
    samples = stored(out)
    assert sorted(samples) == sorted(names)
    for name in names:
        pixels, _ = samples[name]
        expected = reference(tmp_path / "src" / "c" / name)
        assert pixels.shape == expected.shape, name  # size to the pixel, orientation included
        assert psnr(pixels, expected) > 32, (name, psnr(pixels, expected))
        if name.startswith("orient"):  # shot upright: the dark block is top-left
            assert pixels.shape[:2] == ((72, SHORT) if int(name[6]) > 4 else (SHORT, 72))
            assert pixels[:6, :6].mean() < 70, name


def _bars(width: int, height: int) -> tuple[Image.Image, float, float]:
    """Black with a white vertical bar at 80% of the width and a horizontal one at 70% of the
    height; returns the image and the bars' centres (in pixels, 0 = left/top edge)."""
    pixels = np.zeros((height, width, 3), np.uint8)
    x0, y0 = int(width * 0.8), int(height * 0.7)
    pixels[:, x0:x0 + 16] = 255
    pixels[y0:y0 + 16, :] = 255
    return Image.fromarray(pixels), x0 + 8, y0 + 8


def _centre(profile: np.ndarray) -> float:
    weights = np.clip(profile - profile.min(), 0, None)
    return float(((np.arange(len(profile)) + 0.5) * weights).sum() / weights.sum())


@pytest.mark.parametrize("size", [(515, 1436), (1436, 515), (2050, 700), (999, 2601),
                                  (700, 523), (4003, 2250), (300, 257)])
def test_reduced_decode_gives_the_exact_size_and_unsqueezed_content(size: tuple[int, int]
                                                                    ) -> None:
    image, bar_x, bar_y = _bars(*size)
    data = io.BytesIO()
    image.save(data, "JPEG", quality=95, subsampling=0)
    payload, height, width = prepare_image(data.getvalue(),
                                           ImageSettings(short_side=256, encoding="raw"))
    assert (width, height) == nearest(*size, 256)
    pixels = np.frombuffer(payload, np.uint8).reshape(height, width, 3)[..., 0].astype(float)
    scale_x, scale_y = width / size[0], height / size[1]
    # Rows and columns away from the other bar, so each profile sees one bar only.
    column = pixels[: int(height * 0.6)].mean(axis=0)
    row = pixels[:, : int(width * 0.7)].mean(axis=1)
    assert abs(_centre(column) - bar_x * scale_x) < 0.2
    assert abs(_centre(row) - bar_y * scale_y) < 0.2


@pytest.mark.parametrize("size", [(2400, 1600), (3000, 2100)])
def test_quality_through_the_reduced_decode_is_that_of_a_full_decode(tmp_path: Path,
                                                                    size: tuple[int, int]
                                                                    ) -> None:
    # Fine stripes: what a block average (a 1/8-scale decode) aliases and a squeeze smears.
    width, height = size
    y, x = np.mgrid[0:height, 0:width]
    stripes = (np.sin(x / 14 * 2 * np.pi * (1 + y / height / 3)) * 70
               + np.cos(y / 18 * 2 * np.pi) * 40)
    pixels = np.clip(np.stack([stripes + 128, stripes / 2 + 100, 140 - stripes], -1), 0, 255)
    photo = tmp_path / "stripes.jpg"
    Image.fromarray(pixels.astype(np.uint8)).save(photo, quality=92)
    expected = reference(photo, 256)  # a full decode, resized with Lanczos
    payload, height, width = prepare_image(photo.read_bytes(),
                                           ImageSettings(short_side=256, encoding="raw"))
    ours = np.frombuffer(payload, np.uint8).reshape(height, width, 3)
    assert ours.shape == expected.shape
    assert psnr(ours, expected) > 40  # decoded at 1/4 scale, Lanczos from its exact box


def test_upscaling_is_a_recorded_choice(cli, tmp_path: Path) -> None:
    _save(scene(10, 12), tmp_path / "src" / "c" / "tiny.png")
    _save(scene(300, 1), tmp_path / "src" / "c" / "strip.png")
    assert cli("convert", "images", tmp_path / "src", tmp_path / "up").code == 0
    assert stored(tmp_path / "up")["tiny.png"][0].shape == (307, 256, 3)  # as Resize(256)
    assert "76800x256" in rejects(tmp_path / "up")["strip.png"]  # wider than JPEG allows
    kept = cli("convert", "images", tmp_path / "src", tmp_path / "kept", "--no-upscale")
    assert kept.code == 0, kept.err
    samples = stored(tmp_path / "kept")
    assert samples["tiny.png"][0].shape == (12, 10, 3)
    assert samples["strip.png"][0].shape == (1, 300, 3)  # a 1-px strip stays one: no reject
    with Dataset(tmp_path / "kept") as ds:
        assert ds.manifest.settings["upscale"] is False
    with Dataset(tmp_path / "up") as ds:
        assert ds.manifest.settings["upscale"] is True


def test_bad_shapes_are_rejects_judged_on_the_oriented_output(cli, tmp_path: Path) -> None:
    folder = tmp_path / "src" / "c"
    _save(scene(300, 1), folder / "strip.png")
    _save(scene(10, 3000), folder / "needle.png")
    exif = Image.Exif()
    exif[0x0112] = 6
    _save(scene(3000, 10), folder / "needle_rotated.jpg", exif=exif.tobytes())
    _save(scene(64, 48), folder / "fine.png")
    result = cli("convert", "images", tmp_path / "src", tmp_path / "out", "--short-side", 256)
    assert result.code == 0, result.err
    reasons = rejects(tmp_path / "out")
    assert "76800x256" in reasons["strip.png"] and "65,500" in reasons["strip.png"]
    assert "256x76800" in reasons["needle.png"]
    assert "256x76800" in reasons["needle_rotated.jpg"]  # displayed as 10 wide, 3000 high
    assert list(stored(tmp_path / "out")) == ["fine.png"]


def test_sixteen_bit_values_are_scaled_by_bit_depth_not_content(cli, tmp_path: Path) -> None:
    values = np.array([[0, 200, 255, 256], [32768, 65535, 1000, 128]], np.uint16)
    _save(Image.fromarray(values), tmp_path / "src" / "c" / "deep.png")
    low = np.array([[0, 100, 200, 255]], np.uint16)  # all <= 255: still 16-bit values
    _save(Image.fromarray(low), tmp_path / "src" / "c" / "dim.png")
    assert cli("convert", "images", tmp_path / "src", tmp_path / "out", "--short-side", 0,
               "--encoding", "raw").code == 0
    samples = stored(tmp_path / "out")
    expected = np.rint(values * (255 / 65535)).astype(np.uint8)
    np.testing.assert_array_equal(samples["deep.png"][0][..., 0], expected)
    np.testing.assert_array_equal(samples["dim.png"][0][..., 0], [[0, 0, 1, 1]])


def _patches() -> np.ndarray:
    """Saturated and pale flat patches, 16x16 each: colour differences are easy to see."""
    colours = [(230, 30, 30), (30, 200, 40), (40, 50, 220), (240, 200, 30), (30, 200, 210),
               (200, 40, 200), (128, 128, 128), (200, 150, 120), (90, 60, 40), (250, 250, 250),
               (10, 10, 10), (120, 180, 60)]
    return np.concatenate([np.full((16, 16, 3), c, np.uint8) for c in colours], axis=1)


def _interior_lab(pixels: np.ndarray) -> np.ndarray:
    """Mean Lab of each 16x16 patch's central 8x8."""
    return np.array([lab(pixels[4:12, i + 4:i + 12].reshape(-1, 3).astype(float)).mean(0)
                     for i in range(0, pixels.shape[1], 16)])


def _tagged_inputs(folder: Path) -> np.ndarray:
    source = _patches()
    for name in SPACES:
        _save(Image.fromarray(source), folder / f"{name}.jpg", quality=98, subsampling=0,
              icc_profile=rgb_profile(name))
    _save(Image.fromarray(source), folder / "adobe-rgb.png", icc_profile=rgb_profile("adobe-rgb"))
    _save(Image.fromarray(source).convert("L"), folder / "linear-grey.jpg", quality=98,
          icc_profile=grey_profile(1.0))
    return source


@pytest.mark.skipif(not LCMS, reason="this PIL build has no LittleCMS")
def test_embedded_profiles_are_converted_to_srgb(cli, tmp_path: Path) -> None:
    source = _tagged_inputs(tmp_path / "src" / "c")
    assert cli("convert", "images", tmp_path / "src", tmp_path / "out", "--short-side", 0,
               "--quality", 98, "--subsampling", "4:4:4").code == 0
    samples = stored(tmp_path / "out")
    for name in [*SPACES, "adobe-rgb.png"]:
        pixels = samples[name if "." in name else f"{name}.jpg"][0]
        expected = _interior_lab(to_srgb_reference(source, name.split(".")[0]))
        delta_e = np.linalg.norm(_interior_lab(pixels) - expected, axis=-1)
        assert delta_e.max() < 2.5, (name, delta_e.round(1))
    grey = samples["linear-grey.jpg"][0][4:12, 4::16, 0].astype(float)
    linear = source[4:12, 4::16].astype(float) @ [0.299, 0.587, 0.114]
    assert np.abs(grey - srgb_encode(linear / 255) * 255).mean() < 2


@pytest.mark.skipif(LCMS, reason="this PIL build has LittleCMS")
def test_without_littlecms_a_tagged_image_is_a_reject_not_wrong_colours(cli,
                                                                         tmp_path: Path) -> None:
    _tagged_inputs(tmp_path / "src" / "c")
    _save(scene(40, 30), tmp_path / "src" / "c" / "untagged.jpg")
    result = cli("convert", "images", tmp_path / "src", tmp_path / "out")
    assert result.code == 0 and "rejected 5 inputs" in result.out
    reasons = rejects(tmp_path / "out")
    assert len(reasons) == 5 and all("LittleCMS" in r for r in reasons.values())
    assert list(stored(tmp_path / "out")) == ["untagged.jpg"]


def test_keep_icc_stores_the_values_with_their_profile(cli, tmp_path: Path) -> None:
    source = _tagged_inputs(tmp_path / "src" / "c")
    assert cli("convert", "images", tmp_path / "src", tmp_path / "out", "--short-side", 0,
               "--quality", 98, "--subsampling", "4:4:4", "--keep-icc").code == 0
    with Dataset(tmp_path / "out") as ds:
        assert ds.manifest.settings["colour"] == "keep-icc"
        rows = {ds[i]["path"].split("/", 1)[1]: ds[i]["image"].tobytes() for i in range(len(ds))}
    for name in SPACES:
        stored_image = Image.open(io.BytesIO(rows[f"{name}.jpg"]))
        assert stored_image.info["icc_profile"] == rgb_profile(name)
        delta_e = np.linalg.norm(_interior_lab(np.asarray(stored_image))
                                 - _interior_lab(source), axis=-1)
        assert delta_e.max() < 2.5, (name, delta_e.round(1))
    raw = cli("convert", "images", tmp_path / "src", tmp_path / "raw", "--keep-icc",
              "--encoding", "raw")
    assert raw.code == 2 and "--keep-icc" in raw.err and len(raw.err.strip().splitlines()) == 1


def test_an_unusable_profile_is_a_reject_with_its_reason(cli, tmp_path: Path) -> None:
    broken = b"\0" * 16 + b"XXXX" + b"\0" * 200
    _save(scene(40, 30), tmp_path / "src" / "c" / "broken.jpg", icc_profile=broken)
    _save(scene(40, 30), tmp_path / "src" / "c" / "fine.jpg")
    assert cli("convert", "images", tmp_path / "src", tmp_path / "out").code == 0
    assert "ICC profile is unusable" in rejects(tmp_path / "out")["broken.jpg"]
    assert list(stored(tmp_path / "out")) == ["fine.jpg"]


def test_subsampling_is_applied_and_recorded(cli, tmp_path: Path) -> None:
    _save(scene(64, 48), tmp_path / "src" / "c" / "photo.png")
    for mode, factors in (("4:4:4", (1, 1)), ("4:2:2", (2, 1)), ("4:2:0", (2, 2))):
        out = tmp_path / mode.replace(":", "")
        assert cli("convert", "images", tmp_path / "src", out, "--subsampling", mode).code == 0
        with Dataset(out) as ds:
            assert ds.manifest.settings["subsampling"] == mode
            jpeg = Image.open(io.BytesIO(ds[0]["image"].tobytes()))
        assert jpeg.layer[0][1:3] == factors  # luma sampling factors (h, v)
    bad = cli("convert", "images", tmp_path / "src", tmp_path / "bad", "--subsampling", "4:1:1")
    assert bad.code == 2


def test_a_resume_with_other_image_settings_is_refused(cli, tmp_path: Path) -> None:
    folder = tmp_path / "src" / "c"
    for i in range(40):
        _save(scene(64 + i, 48), folder / f"p{i:02d}.png")
    (folder / "zz_broken.jpg").write_bytes(b"\xff\xd8 not really")
    args = ["convert", "images", tmp_path / "src", tmp_path / "out", "--shard-size", "8KB",
            "--workers", 1]
    assert cli(*args, "--strict").code == 1  # stopped by an error: its shards are journalled
    for other in (["--subsampling", "4:4:4"], ["--no-upscale"], ["--keep-icc"]):
        refused = cli(*args, *other)
        assert refused.code == 2 and "interrupted conversion" in refused.err, other
    resumed = cli(*args)
    assert resumed.code == 0 and "kept from the interrupted run" in resumed.out


@pytest.mark.parametrize("subsampling", ["4:4:4", "4:2:2"])
def test_the_loader_reads_every_subsampling(tmp_path: Path, subsampling: str) -> None:
    for i in range(4):
        _save(scene(64 + 8 * i, 48), tmp_path / "src" / "c" / f"p{i}.png")
    out = tmp_path / "out"
    convert("images", tmp_path / "src", out, "--short-side", 32, "--subsampling", subsampling,
            "--workers", 1)
    loader = dp.Loader(out, batch_size=4, num_workers=0,
                       transform=dp.image.RandomResizedCrop(24))
    batch = next(iter(loader))
    assert tuple(batch["image"].shape) == (4, 3, 24, 24)
