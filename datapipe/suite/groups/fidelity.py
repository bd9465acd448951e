"""Fidelity beside speed: the median PSNR of the images a conversion stored against a Pillow
reference of the same photos, next to the PSNR a full decode with datapipe's resize and
encoding gets."""

from __future__ import annotations

import io
import math
import statistics
from pathlib import Path
from typing import Any

from datapipe.suite.fixtures import list_photos
from datapipe.suite.isolated.reencode import QUALITY, SHORT_SIDE


def reference_image(path: str) -> Any:
    """What the photo looks like at SHORT_SIDE: open, exif_transpose, ICC profile -> sRGB, RGB,
    Lanczos so the short side is SHORT_SIDE, each side rounded to nearest (halves up)."""
    import numpy as np
    from PIL import Image, ImageCms, ImageOps

    with Image.open(path) as opened:
        image = ImageOps.exif_transpose(opened)
        icc = image.info.get("icc_profile")
        if icc and image.mode in ("RGB", "L", "CMYK"):
            source = ImageCms.ImageCmsProfile(io.BytesIO(icc))
            image = ImageCms.profileToProfile(image, source, ImageCms.createProfile("sRGB"),
                                              outputMode="RGB")
        image = image.convert("RGB")
    shorter = min(image.size)
    size = tuple((2 * side * SHORT_SIDE + shorter) // (2 * shorter) for side in image.size)
    return np.asarray(image.resize(size, Image.Resampling.LANCZOS))


def psnr(payload: bytes, reference: Any) -> float | None:
    """PSNR in dB of a JPEG against the reference; None when the sizes differ (no match)."""
    import numpy as np
    from PIL import Image

    ours = np.asarray(Image.open(io.BytesIO(payload)).convert("RGB"))
    if ours.shape != reference.shape:
        return None
    mse = float(np.mean((ours.astype(np.float64) - reference.astype(np.float64)) ** 2))
    return 10 * math.log10(255 ** 2 / max(mse, 1e-10))


class Fidelity:
    """PSNR against the reference over `count` evenly spaced photos of `src`: of a full decode
    (its pixels encoded as datapipe does) and, once each, of what converters stored."""

    def __init__(self, src: Path, count: int) -> None:
        from PIL import Image

        photos = list_photos(src)
        self.references = {Path(p).relative_to(src).as_posix(): reference_image(p)
                           for p, _ in photos[::max(1, len(photos) // count)][:count]}
        self.measured: dict[str, dict[str, Any]] = {}
        payloads = []
        for reference in self.references.values():
            buffer = io.BytesIO()
            Image.fromarray(reference).save(buffer, "JPEG", quality=QUALITY, subsampling="4:2:0")
            payloads.append(buffer.getvalue())
        self.full_decode = self.summary(payloads)

    def measure(self, converter: str, out: Path) -> None:
        """The images `converter` stored in the datapipe dataset `out`, the first time."""
        from datapipe.format import Dataset

        if converter not in self.measured:
            with Dataset(out) as ds:
                index = {ds[i]["path"]: i for i in range(len(ds))}
                self.measured[converter] = self.summary(
                    [ds[index[key]]["image"].tobytes() for key in self.references])

    def summary(self, payloads: list[bytes]) -> dict[str, Any]:
        values = [psnr(p, r) for p, r in zip(payloads, self.references.values(), strict=True)]
        sized = [v for v in values if v is not None]
        return {"median_db": statistics.median(sized) if sized else None,
                "images": len(values), "wrong_size": len(values) - len(sized)}
