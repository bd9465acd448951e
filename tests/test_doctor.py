"""`datapipe doctor`: what the active PIL really reads, and what to install when it lacks some."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from PIL import Image, features

from tests.conftest import convert


def _reads_deflate_tiff() -> bool:
    buffer = io.BytesIO()
    try:
        Image.new("L", (3, 3), 7).save(buffer, "TIFF", compression="tiff_adobe_deflate")
        return Image.open(buffer).getpixel((1, 1)) == 7
    except Exception:
        return False


def _formats(out: str) -> dict[str, str]:
    line = next(x for x in out.splitlines() if x.startswith("PIL reads: "))
    return dict(item.rsplit(" ", 1) for item in line.removeprefix("PIL reads: ").split(", "))


def test_doctor_lists_the_formats_this_pil_reads(cli) -> None:
    result = cli("doctor")
    assert result.code == 0
    formats = _formats(result.out)
    assert formats["JPEG"] == formats["PNG"] == formats["GIF"] == "yes"
    assert formats["TIFF (deflate)"] == ("yes" if _reads_deflate_tiff() else "NO")
    assert formats["WebP"] == ("yes" if features.check("webp") else "NO")
    assert set(formats) >= {"BMP", "PPM", "TIFF", "TIFF (LZW)", "AVIF"}
    lcms = "yes" if features.check("littlecms2") else "NO"
    assert f"PIL colour management (LittleCMS): {lcms}" in result.out


def test_doctor_names_the_packages_a_missing_format_needs(cli) -> None:
    result = cli("doctor")
    warning = [x for x in result.err.splitlines() if "cannot read" in x]
    missing_tiff = not _reads_deflate_tiff()
    missing_lcms = not features.check("littlecms2")
    assert bool(warning) == (missing_tiff or missing_lcms or not features.check("webp"))
    if missing_tiff:
        assert "TIFF (deflate)" in warning[0] and "libtiff-dev" in warning[0]
    if missing_lcms:
        assert "LittleCMS" in warning[0] and "liblcms2-dev" in warning[0]
    if warning:
        assert "tools/setup.sh" in warning[0] and len(warning) == 1
    assert "AVIF" not in "".join(warning)  # optional: pillow needs a libavif Debian 12 lacks


def test_doctor_says_the_jpeg_extension_is_active(cli) -> None:
    result = cli("doctor")
    assert "JPEG extension: active" in result.out
    assert "not built" not in result.err


_WITHOUT_EXTENSION = """
import sys, warnings
sys.modules["datapipe.image._jpeg"] = None  # as in a source tree whose extension was not built
"""


def test_without_the_extension_doctor_and_the_loader_say_so(image_folder: Path,
                                                            tmp_path: Path) -> None:
    """A loader silently at half speed is the failure: doctor names it and Loader warns once."""
    image_shards = tmp_path / "shards"
    convert("images", image_folder, image_shards)
    code = _WITHOUT_EXTENSION + f"""
from datapipe.cli import main
import datapipe as dp
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(2):
        dp.Loader({str(image_shards)!r}, batch_size=2, num_workers=0,
                  transform=dp.image.CenterCrop(16))
print("WARNINGS", sum("JPEG extension" in str(w.message) for w in caught))
main(["doctor"])
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert "WARNINGS 1" in proc.stdout
    assert "JPEG extension: NOT built" in proc.stdout
    assert "is not built, so images decode through PIL" in proc.stderr
