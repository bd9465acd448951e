"""Output size and placement: computed from the full-resolution image, whatever decode ran.

The size comes from the stored size (orientation only swaps the two sides), each side rounded to
the nearest pixel, halves up. A JPEG may be decoded at 1/2, 1/4 or 1/8 scale (DCT scaling,
which rounds sizes up); the resize then reads exactly the part of the reduced image that covers
the full one, so content lands where a full decode would put it. Orientation is applied last,
to the small image.
"""

from __future__ import annotations

from PIL import Image

ORIENTATION_TAG = 0x0112
_TRANSPOSE = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
              4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE,
              6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
              8: Image.Transpose.ROTATE_90}
# How much larger than the target the reduced image must stay, per DCT scale. 1/2 and 1/4 run
# true reduced IDCTs; a reduced image as large as the target, resized with Lanczos from its
# exact box, is within 0.3 dB of a full decode at the median (the suite's convert group),
# where a 2x margin would cost 0.6x the speed. 1/8 keeps only each block's average, which
# aliases fine detail (down to 23 dB on fine stripes), so it needs a 2x margin.
DCT_MARGINS = {8: 2, 4: 1, 2: 1}
RESAMPLE = Image.Resampling.LANCZOS


def target_size(width: int, height: int, short_side: int,
                upscale: bool = True) -> tuple[int, int]:
    """(width, height) with the shorter side `short_side`, the other rounded to nearest (halves
    up, in integers); the stored size for 0, or for a smaller image when not upscaling."""
    shorter = min(width, height)
    if not short_side or (not upscale and shorter <= short_side):
        return width, height
    return (max(1, (2 * width * short_side + shorter) // (2 * shorter)),
            max(1, (2 * height * short_side + shorter) // (2 * shorter)))


def oriented(size: tuple[int, int], orientation: int) -> tuple[int, int]:
    """`size` as displayed: EXIF orientations 5 to 8 swap width and height."""
    return (size[1], size[0]) if orientation in (5, 6, 7, 8) else size


def dct_scale(stored: tuple[int, int], target: tuple[int, int]) -> int:
    """The largest of 1, 2, 4, 8 whose reduced image keeps its DCT_MARGINS over the target on
    both sides (the reduced size rounds up, so whole-number division is on the safe side)."""
    return next((scale for scale, margin in DCT_MARGINS.items()
                 if scale * margin <= min(stored[0] // target[0], stored[1] // target[1])), 1)


def orientation_of(image: Image.Image) -> int:
    """The EXIF orientation (1 to 8) from the header alone; anything else counts as 1, as in
    ImageOps.exif_transpose. Image.getexif itself: PNG's would decode the whole image first."""
    value = Image.Image.getexif(image).get(ORIENTATION_TAG, 1)
    return value if value in _TRANSPOSE else 1


def resize_and_orient(decoded: Image.Image, scale: int, stored: tuple[int, int],
                      target: tuple[int, int], orientation: int) -> Image.Image:
    """Resize `decoded` (the stored image at 1/`scale`) to `target` (in stored orientation),
    reading the box that covers the full image, then orient it."""
    box = (0.0, 0.0, stored[0] / scale, stored[1] / scale)
    if decoded.size != target or box != (0.0, 0.0, *map(float, decoded.size)):
        decoded = decoded.resize(target, RESAMPLE, box=box)
    method = _TRANSPOSE.get(orientation)
    return decoded.transpose(method) if method is not None else decoded
