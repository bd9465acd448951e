"""`PatchLoader`: images at their own size and shape, as the patch sequences a native-resolution
vision model reads (Qwen2-VL, SigLIP2 NaFlex, NaViT), batched by a patch budget."""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from datapipe.errors import ArgumentError
from datapipe.format.concat import SOURCE_FIELD
from datapipe.format.integrity import check_verify_mode
from datapipe.format.sources import resolve_location
from datapipe.image.patch_steps import patch_steps
from datapipe.image.placement import check_picklable
from datapipe.image.transforms import Transform
from datapipe.loader.arguments import check_counter, check_flag, check_optional
from datapipe.loader.batch_loop import BatchProducer
from datapipe.loader.class_labels import ClassesArg, check_classes
from datapipe.loader.device import DeviceFeed, resolve_device
from datapipe.loader.distributed import resolve_rank
from datapipe.loader.extra_columns import add_to_batch
from datapipe.loader.mixing import MixtureSetup, check_mixture_arguments, describe
from datapipe.loader.patch_batches import PatchBatchBuilder, PatchBatchSpec
from datapipe.loader.patch_collate import batch_keys, collate_patches
from datapipe.loader.patch_epochs import patch_planner, window_images
from datapipe.loader.patch_presets import PatchSettings, resolve_preset
from datapipe.loader.patch_sources import PatchSources, fitted, read_sources
from datapipe.loader.token_mixing import TokenMixing, step_unit
from datapipe.loader.token_plans import WindowedRankPlan
from datapipe.loader.windowed_loader import WindowedLoader
from datapipe.sampling.mixture_weights import ScheduleArg

OVERSIZE = ("refuse", "downscale")
# A mixture's weights, in images or in patches: TokenLoader's by documents or by tokens, an
# image's patch count standing for a document's length.
WEIGHT_UNITS = {"images": "documents", "patches": "tokens"}


class PatchLoader(WindowedLoader):
    """Batches of images as patch sequences, sized by a patch budget.

    `preset="qwen2_vl"`: packed `pixel_values` (sum N, 1176) float32 exactly as transformers'
    `Qwen2VLImageProcessor` lays them out, `image_grid_thw` (n, 3); `preset="siglip2"`: padded
    `pixel_values` (B, max_num_patches, 768), `pixel_attention_mask`, `spatial_shapes`, as
    `Siglip2ImageProcessor` (NaFlex) gives them; `preset="navit"`: packed patches of
    `patch_size`, row by row, `spatial_shapes`. Packed batches also carry `cu_seqlens` (int32)
    and `max_seqlen` for varlen attention; every batch `patch_positions` (each patch's row and
    column in its image's grid), `index`, `label`, `is_padding` (per image), `num_patches` and
    `efficiency` (real patches / max_patches packed, / rows x max_num_patches padded), and the
    dataset's extra columns.

    Each image's target size is planned from its stored size (no decode): the processor's own
    resize rule. `max_patches` bounds a batch's patch rows (the vision tower's sequence);
    whole images are packed best-fit-decreasing under it (an image is never split). An image
    with more patches than the budget is refused at construction, or with
    `oversize="downscale"` resized to fit. `flip=True` mirrors half the images (a pure
    function of seed, epoch and index); `transform` runs per-image steps in the workers on
    each image at its planned size, before normalisation: `ColorJitter`, `PerSample` (the
    user's function), the sample-step recipes (image/patch_steps.py). Shuffle, rank sharding
    with equal steps, exact and elastic resume and the `device=` hand-off are TokenLoader's
    (docs/patches.md).

    `path` may name several image datasets (a list, or a dict name -> path) mixed by
    `weights=`, by images (`weight_by="images"`) or by patches (`weight_by="patches"`), over
    epochs of `epoch_size` images or patches (default: all of them), as TokenLoader mixes
    documents by count or by tokens; `classes="union"` or a list renumbers datasets whose
    classes differ. A batch then gains `source` (int64, one per image, aligned with `index`,
    which is the image's id within its own dataset). See docs/mixtures.md.
    """

    def __init__(self, path: str | Path | Sequence[str | Path] | Mapping[str, str | Path],
                 preset: str, max_patches: int | None = None, *,
                 batch_size: int | None = None, patch_size: int | None = None,
                 min_pixels: int | None = None, max_pixels: int | None = None,
                 max_num_patches: int | None = None,
                 image_mean: tuple[float, float, float] | None = None,
                 image_std: tuple[float, float, float] | None = None,
                 layout: str | None = None, merge_size: int | None = None,
                 temporal_patch_size: int | None = None, oversize: str = "refuse",
                 flip: bool = False, transform: Transform | None = None,
                 shuffle: bool = True, seed: int = 0,
                 num_workers: int = 0, rank: int | None = None, world_size: int | None = None,
                 device: str | torch.device = "cpu", prefetch: int = 2, persistent: bool = True,
                 pack_window: int = 4096, plan_window: int | None = None,
                 on_error: str = "raise", verify: str = "cheap",
                 cache_dir: str | Path | None = None, cache_size: int | str | None = None,
                 fields: Iterable[str] | None = None,
                 extra_columns: tuple[str, ...] | None = None, classes: ClassesArg = None,
                 weights: ScheduleArg | None = None, weight_by: str = "images",
                 epoch_size: int | None = None, reweight: bool = False) -> None:
        super().__init__(describe(path), fields)
        epoch_size = check_optional("epoch_size", epoch_size, minimum=1)
        mixing = check_mixture_arguments(path, weights, epoch_size, reweight, cache_dir,
                                         cache_size)
        if weight_by not in WEIGHT_UNITS:
            raise ArgumentError(f"weight_by must be one of {', '.join(WEIGHT_UNITS)}, got "
                                f"{weight_by!r}")
        self.weight_by, wanted_classes = weight_by, check_classes(classes)
        given = {k: v for k, v in {
            "layout": layout, "patch_size": patch_size, "merge_size": merge_size,
            "temporal_patch_size": temporal_patch_size, "min_pixels": min_pixels,
            "max_pixels": max_pixels, "max_num_patches": max_num_patches,
            "image_mean": image_mean, "image_std": image_std}.items() if v is not None}
        settings = resolve_preset(preset, given)
        if oversize not in OVERSIZE:
            raise ArgumentError(f"oversize must be one of {OVERSIZE}, got {oversize!r}")
        self.path = (mixing.sources.locations if mixing
                     else resolve_location(path, cache_dir, cache_size))
        verify = check_verify_mode(verify)
        self.seed = check_counter("seed", seed)
        self.shuffle, self.flip = check_flag("shuffle", shuffle), check_flag("flip", flip)
        num_workers = check_counter("num_workers", num_workers)
        steps = patch_steps(transform)
        if num_workers:
            check_picklable(steps)
        prefetch = check_counter("prefetch", prefetch, minimum=1)
        self.pack_window = check_counter("pack_window", pack_window, minimum=1)
        plan_window = check_optional("plan_window", plan_window, minimum=1)
        self.layout = settings.layout
        self.max_patches = self._budget(settings, check_optional("max_patches", max_patches, 1),
                                        check_optional("batch_size", batch_size, 1))
        self.rank, self.world_size = resolve_rank(rank, world_size)
        self._group_implicit = rank is None and world_size is None
        self.device = resolve_device(device)
        sources = read_sources(self.path, tuple(map(str, self.path)) if mixing else
                               (describe(path),), mixing, verify, extra_columns,
                               wanted_classes)
        self.classes, self._manifest = sources.labels.classes, sources.fingerprint
        self.num_images = sources.num_images
        self.settings = fitted(settings, oversize, self.max_patches)
        sources.check_fits(self.settings.patches.geometry, self.max_patches)
        self.counts = sources.combined(self.settings.patches.geometry)
        self.preset, self.grid_field = settings.preset, settings.grid_field
        self.mixing = None if mixing is None else self._mixing(mixing, sources, weight_by,
                                                               epoch_size)
        self._check_fields(batch_keys(self.layout, self.grid_field) + sources.extras
                           + ((SOURCE_FIELD,) if self.mixing else ()))
        self.plan_window = window_images(plan_window, self.max_patches, self.counts)
        self._planner = patch_planner(self.layout, self.counts, self.max_patches,
                                      self._row_patches(), self.plan_window, self.pack_window,
                                      self.shuffle, self.seed, self.mixing)
        self._patches_seen = self._patches_budgeted = 0
        self.skipped: list[tuple[int, str]] = []
        self._start_producer(PatchBatchSpec(
            self.path, self.settings.patches, self.layout, self._capacity(),
            self._row_patches(), self.seed, self.flip, on_error, sources.extras, verify,
            sources.labels.maps, steps), num_workers, prefetch, persistent)

    def _start_producer(self, spec: PatchBatchSpec, num_workers: int, prefetch: int,
                        persistent: bool) -> None:
        self.spec = spec
        # Every field that views the batch buffer: one registration covers them all.
        self._feed = DeviceFeed(self.device, pin=("pixel_values", "patch_positions",
                                                  "pixel_attention_mask"), record_stages=True)
        self._producer = BatchProducer(functools.partial(PatchBatchBuilder, spec),
                                       num_workers, prefetch, spec.slot_nbytes(), persistent)
        self._producer.check_memory(self._passes.owner, f"a batch of up to "
                                    f"{self._capacity():,} patches of "
                                    f"{self.settings.patches.patch_dim} floats",
                                    "max_patches (or batch_size), num_workers or prefetch")

    def _budget(self, settings: PatchSettings, max_patches: int | None,
                batch_size: int | None) -> int:
        """Patch rows a batch may hold: max_patches, or (padded) batch_size rows."""
        if self.layout == "packed":
            if max_patches is None:
                raise ArgumentError(f"preset={settings.preset!r} packs images: give "
                                    "max_patches (the patch budget of a batch)")
            if batch_size is not None:
                raise ArgumentError(f"batch_size does not apply to preset="
                                    f"{settings.preset!r} (max_patches sizes its batches)")
            return max_patches
        row = settings.patches.geometry.max_patches_per_image
        if max_patches is None and batch_size is None:
            raise ArgumentError(f"preset={settings.preset!r}: give batch_size (images a batch) "
                                "or max_patches (a budget of patch rows)")
        rows = batch_size if batch_size is not None else max_patches // row
        if max_patches is not None and batch_size is not None and rows * row > max_patches:
            raise ArgumentError(f"batch_size={batch_size} images of {row} patches is more than "
                                f"max_patches={max_patches}")
        if rows < 1:
            raise ArgumentError(f"max_patches={max_patches} holds no image of {row} patches "
                                f"(max_num_patches); raise it to at least {row}")
        return rows * row

    def _row_patches(self) -> int:
        return self.settings.patches.geometry.max_patches_per_image if \
            self.layout == "padded" else 0

    def _capacity(self) -> int:
        return self.max_patches

    def _mixing(self, setup: MixtureSetup, sources: PatchSources, weight_by: str,
                epoch_size: int | None) -> TokenMixing:
        """A mixture's sources weighed as TokenLoader weighs documents, an image's patch
        count for a document's length."""
        unit = WEIGHT_UNITS[weight_by]
        rows = self.max_patches // self._row_patches() if self.layout == "padded" else None
        step = step_unit(unit, self.max_patches if unit == "tokens" else None, rows, None,
                         self.world_size)
        if step is None and setup.weights is not None and \
                len(setup.schedule(()).phases) > 1:
            raise ArgumentError(f"weights: phases by step with weight_by={weight_by!r} need a "
                                f"fixed number of images a step (preset={self.preset!r} packs "
                                "a varying number); give weight_by='patches'")
        geometry = self.settings.patches.geometry
        counts = sources.counts(geometry)
        longest = min(geometry.max_patches_per_image, self.max_patches)
        return TokenMixing(setup, counts, unit, epoch_size, self.seed, self.shuffle, step,
                           [longest] * len(counts), sources.totals(geometry))

    # --- iteration -----------------------------------------------------------------------

    def _pass_batches(self) -> Iterator[dict[str, Any]]:
        epoch, start = self._begin_epoch()
        plan = self._plan(epoch)
        if start == 0:
            self.skipped = []
        host = self._host_batches(plan, epoch, start)
        for b, batch in self._feed.batches(host):
            self._report(b, **self._feed.take_stages(b))
            self._handed_out(b, plan)
            yield batch
        self._finish_empty(start, plan)
        if self.skipped:
            warnings.warn(f"{describe(self.path)}: skipped {len(self.skipped)} images that "
                          f"failed to decode this epoch (first: {self.skipped[0][1]}); see "
                          "loader.skipped", stacklevel=2)

    def _host_batch(self, b: int, meta: dict[str, Any], slot: torch.Tensor,
                    plan: WindowedRankPlan) -> dict[str, Any]:
        batch = collate_patches(self.spec, meta, slot, self.grid_field, self.max_patches)
        add_to_batch(batch, meta["columns"])
        self.skipped.extend(meta["skipped"])
        if not plan.padding(b):
            self._patches_seen += batch["num_patches"]
            self._patches_budgeted += round(batch["num_patches"] / batch["efficiency"]) \
                if batch["efficiency"] else 0
        return batch

    @property
    def efficiency(self) -> float:
        """Running patch efficiency over the batches so far: real patches / patches budgeted
        (packed: max_patches a batch; padded: its rows x max_num_patches)."""
        return self._patches_seen / self._patches_budgeted if self._patches_budgeted else 1.0

    # --- state ---------------------------------------------------------------------------

    def progress(self) -> dict[str, dict[str, int]]:
        """Images given so far, all ranks together (the epochs before this one whole), and
        the patches of this epoch so far (also in the state dict, as `progress`); a
        mixture's images and patches of each source over all epochs so far."""
        position = self._position
        start = self._epoch_start(position.epoch)
        if self.mixing is not None:
            drawn = self.mixing.progress(position, self.world_size, start)
            return {name: {"images": n["documents"], "patches": n["tokens"]}
                    for name, n in drawn.items()}
        images, patches = start.drawn_by(position.segments, position.batches_done,
                                         self.world_size, position.epoch)
        per_epoch = self.num_images
        return {describe(self.path): {"images": images + position.epoch * per_epoch,
                                      "patches_this_epoch": patches}}

    def _epoch_amount_bound(self) -> int:
        return self.num_images * self.settings.patches.geometry.max_patches_per_image

    def _identity(self) -> dict[str, Any]:
        geometry = dataclasses.asdict(self.settings.patches.geometry)
        return {"num_images": self.num_images, "preset": self.preset, "layout": self.layout,
                "max_patches": self.max_patches, "geometry": geometry,
                "shuffle": self.shuffle, "seed": self.seed, "rank": self.rank,
                "world_size": self.world_size, "pack_window": self.pack_window,
                "plan_window": self.plan_window, "manifest": self._manifest,
                **(self._mixture_identity() if self.mixing else {})}

    def _mixture_identity(self) -> dict[str, Any]:
        """The mixture's entries, its unit named as this loader's argument is."""
        identity = self.mixing.identity()
        identity["weight_by"] = self.weight_by
        return identity

