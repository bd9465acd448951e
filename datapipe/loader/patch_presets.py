"""PatchLoader's presets: what each model's image processor does, as settings.

"qwen2_vl": transformers' `Qwen2VLImageProcessor` (Qwen2-VL, Qwen2.5-VL): smart resize to
sides of 28 px within min/max pixels, 14-px patches, the frame repeated over 2 temporal
patches, 2 x 2 merge order, OpenAI CLIP mean/std; packed, with `image_grid_thw`.
"siglip2": `Siglip2ImageProcessor` (NaFlex): 16-px patches, at most `max_num_patches` (256) an
image, mean/std 0.5, each image padded to max_num_patches with `pixel_attention_mask` and
`spatial_shapes`.
"navit": NaViT ("Patch n' Pack"): images near their own size (sides multiples of patch_size,
within min/max pixels), patches row by row, packed under the budget, `spatial_shapes`.

A preset fixes what the model's architecture fixes (layout, patch size, merge and temporal
patch sizes); explicit arguments may set the rest, and one that contradicts what the preset
fixes, or that it has no use for, is refused in one line naming both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from datapipe.errors import ArgumentError
from datapipe.image.patch_geometry import GridGeometry, NaFlexGeometry
from datapipe.image.patch_producer import PatchSpec

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
HALF = (0.5, 0.5, 0.5)

# Per preset: what it fixes, and the defaults of what the caller may set.
FIXED: dict[str, dict[str, Any]] = {
    "qwen2_vl": {"layout": "packed", "patch_size": 14, "merge_size": 2,
                 "temporal_patch_size": 2},
    "siglip2": {"layout": "padded", "patch_size": 16},
    "navit": {"layout": "packed", "merge_size": 1, "temporal_patch_size": 1},
}
DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen2_vl": {"min_pixels": 56 * 56, "max_pixels": 28 * 28 * 1280,
                 "image_mean": OPENAI_CLIP_MEAN, "image_std": OPENAI_CLIP_STD},
    "siglip2": {"max_num_patches": 256, "image_mean": HALF, "image_std": HALF},
    "navit": {"patch_size": 16, "min_pixels": 16 * 16, "max_pixels": 512 * 512,
              "image_mean": HALF, "image_std": HALF},
}
PRESETS = tuple(FIXED)
# The per-image grid's field name, as the model's forward takes it.
GRID_FIELDS = {"qwen2_vl": "image_grid_thw", "siglip2": "spatial_shapes",
               "navit": "spatial_shapes"}


@dataclass(frozen=True)
class PatchSettings:
    preset: str
    layout: str
    patches: PatchSpec
    grid_field: str


def resolve_preset(preset: str, given: dict[str, Any]) -> PatchSettings:
    """The preset's settings with the caller's (`given`: the arguments not None) applied."""
    if preset not in FIXED:
        raise ArgumentError(f"preset must be one of {PRESETS}, got {preset!r}")
    fixed, defaults = FIXED[preset], DEFAULTS[preset]
    for name, value in given.items():
        if name in fixed and value != fixed[name]:
            raise ArgumentError(f"{name}={value!r} contradicts preset={preset!r}, which has "
                                f"{name}={fixed[name]!r}")
        if name not in fixed and name not in defaults:
            raise ArgumentError(f"{name}={value!r} does not apply to preset={preset!r} (it "
                                f"takes {', '.join(sorted(defaults))})")
    settings = {**defaults, **fixed, **given}
    mean, std = tuple(settings["image_mean"]), tuple(settings["image_std"])
    if preset == "siglip2":
        geometry: Any = NaFlexGeometry(settings["patch_size"], settings["max_num_patches"])
        layout = "hwc"
    else:
        geometry = GridGeometry(settings["patch_size"], settings["merge_size"],
                                settings["temporal_patch_size"], settings["min_pixels"],
                                settings["max_pixels"])
        layout = "cthw" if preset == "qwen2_vl" else "hwc"
    return PatchSettings(preset, settings["layout"], PatchSpec(geometry, layout, mean, std),
                         GRID_FIELDS[preset])
