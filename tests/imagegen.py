"""Synthetic image files for tests: ordinary photos-ish images and every awkward kind."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image


def noise_image(width: int, height: int, seed: int, mode: str = "RGB") -> Image.Image:
    """Smooth gradients plus noise: compresses like a photo, cheap to make."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([(x * (1 + c) + y * (3 - c)) % 256 for c in range(3)], axis=-1)
    pixels = (base + rng.integers(0, 40, size=(height, width, 3))).clip(0, 255).astype(np.uint8)
    image = Image.fromarray(pixels)
    return image if mode == "RGB" else image.convert(mode)


def photo_image(width: int, height: int, seed: int) -> Image.Image:
    """Smooth colour fields with detail in brightness, as photos are: `noise_image`'s noise,
    independent per channel, is far harsher on colour (chroma) than any photo."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / max(width, height)
    base = np.stack([128 + 100 * np.sin(3 * x + c + 6 * y * (c - 1)) for c in range(3)], -1)
    detail = rng.normal(0, 12, (height, width, 1))
    return Image.fromarray((base + detail).clip(0, 255).astype(np.uint8))


def jpeg_bytes(image: Image.Image, quality: int = 90, **kwargs: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=quality, **kwargs)
    return buffer.getvalue()


def exif_rotated_jpeg(width: int, height: int, seed: int, orientation: int = 6) -> bytes:
    """A JPEG stored `width` x `height` whose EXIF says to rotate it (6 = 90 deg clockwise)."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    return jpeg_bytes(noise_image(width, height, seed), exif=exif.tobytes())


def make_image_folder(root: Path, classes: int = 3, per_class: int = 4, size: tuple[int, int] =
                      (96, 64), seed: int = 0) -> Path:
    """An ImageFolder tree of plain RGB JPEGs: root/class_<k>/img_<i>.jpg."""
    for c in range(classes):
        folder = root / f"class_{c}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            w, h = size[0] + 8 * i, size[1] + 4 * c
            (folder / f"img_{i:03d}.jpg").write_bytes(
                jpeg_bytes(noise_image(w, h, seed * 1000 + c * 100 + i)))
    return root


def write_awkward_images(folder: Path) -> dict[str, str]:
    """Every awkward kind a converter must handle; returns name -> what should happen."""
    folder.mkdir(parents=True, exist_ok=True)
    base = noise_image(80, 60, 7)
    cmyk = io.BytesIO()
    base.convert("CMYK").save(cmyk, "JPEG", quality=90)
    (folder / "cmyk.jpg").write_bytes(cmyk.getvalue())
    base.convert("L").save(folder / "gray.jpg", quality=90)
    rgba = base.convert("RGBA")
    alpha = np.zeros((60, 80), dtype=np.uint8)
    alpha[:, 40:] = 255  # left half fully transparent
    rgba.putalpha(Image.fromarray(alpha))
    rgba.save(folder / "alpha.png")
    base.convert("P", palette=Image.Palette.ADAPTIVE).save(folder / "palette.gif")
    (folder / "rotated.jpg").write_bytes(exif_rotated_jpeg(80, 60, 8))
    good = jpeg_bytes(base)
    (folder / "truncated.jpg").write_bytes(good[: len(good) // 2])
    (folder / "empty.jpg").write_bytes(b"")
    (folder / "notes.jpg").write_text("this is a text file, not an image\n")
    return {"cmyk.jpg": "ok", "gray.jpg": "ok", "alpha.png": "ok", "palette.gif": "ok",
            "rotated.jpg": "ok", "truncated.jpg": "reject", "empty.jpg": "reject",
            "notes.jpg": "reject"}
