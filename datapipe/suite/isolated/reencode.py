"""How the convert group's peers re-encode a photo, the straightforward way their users would
write it; beside clock.py so that a peer in a venv of its own (Streaming's MDSWriter) runs the
very same code. Imports only PIL."""

from __future__ import annotations

import io
from typing import Any

SHORT_SIDE = 256
QUALITY = 90


def plain_transform(payload: bytes, label: int) -> dict[str, Any]:
    """One photo the straightforward way: full decode, orient, RGB, resize, re-encode."""
    from PIL import Image, ImageOps

    with Image.open(io.BytesIO(payload)) as opened:
        image = ImageOps.exif_transpose(opened).convert("RGB")
    scale = SHORT_SIDE / min(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    buffer = io.BytesIO()
    image.resize(size, Image.Resampling.BICUBIC).save(buffer, "JPEG", quality=QUALITY)
    return {"image": buffer.getvalue(), "label": label}
