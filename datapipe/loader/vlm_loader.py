"""`VLMLoader`: image conversations packed under a token budget, as a vision-language model's
forward takes them (Qwen2-VL / Qwen2.5-VL first).

A loader of its own rather than a TokenLoader mode: a batch is text and patches together, so
its buffer, its worker and its fields are PatchLoader's and TokenLoader's at once, and the
sequence length the planner packs by (text + each image's tokens) is known only with the
preset's resize rule. The plan is the windowed token planner's, with that expanded length as a
sample's length; a sample is never split (its image tokens stay whole).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from datapipe.errors import ArgumentError
from datapipe.format.concat import SOURCE_FIELD
from datapipe.format.integrity import check_verify_mode
from datapipe.format.sources import resolve_location
from datapipe.loader.arguments import check_counter, check_flag, check_optional
from datapipe.loader.batch_loop import BatchProducer
from datapipe.loader.device import DeviceFeed, resolve_device
from datapipe.loader.distributed import resolve_rank
from datapipe.loader.mixing import check_mixture_arguments, describe
from datapipe.loader.patch_collate import grid_tensor
from datapipe.loader.patch_presets import resolve_preset
from datapipe.loader.slots import slot_view
from datapipe.loader.token_epochs import TokenEpochPlanner
from datapipe.loader.token_mixing import TokenMixing, step_unit
from datapipe.loader.token_plans import WindowedRankPlan
from datapipe.loader.vlm_batches import POSITIONS, ROWS, VLMBatchBuilder, VLMBatchSpec
from datapipe.loader.vlm_sources import read_sources
from datapipe.loader.windowed_loader import WindowedLoader
from datapipe.sampling.mixture_weights import ScheduleArg
from datapipe.sampling.overflow import Overflow

OVERFLOW = ("refuse", "drop")
PRESETS = ("qwen2_vl",)
BATCH_KEYS = ("input_ids", "labels", "position_ids", "mm_token_type_ids", "cu_seqlens",
              "seq_idx", "max_seqlen", "pixel_values", "image_grid_thw", "index",
              "is_padding", "num_real_tokens", "num_loss_tokens", "efficiency")
WINDOW_BATCHES = 256


class VLMLoader(WindowedLoader):
    """Packed batches of image conversations (`datapipe convert vlm`), sized by a token
    budget that counts each image's tokens.

    Each batch (preset="qwen2_vl"): `input_ids` (1, T) with each image placeholder expanded
    to its image's tokens (its grid at the processor's target size ÷ merge²), `labels`
    (1, T), unshifted as transformers shifts them: -100 off the assistant turns, on image
    tokens and at each sample's first token; `position_ids` (4, 1, T): the text positions
    (from 0 in each sample, from which transformers builds the packed attention mask) above
    Qwen2-VL's three M-RoPE rows; `mm_token_type_ids` (1, T); `cu_seqlens`, `seq_idx`,
    `max_seqlen` for varlen attention; `pixel_values` (sum N, 1176) and `image_grid_thw`
    (n, 3) for exactly the batch's images, in order; `index`, `is_padding`,
    `num_real_tokens`, `num_loss_tokens`, `efficiency` (tokens / max_tokens).

    A sample longer than `max_tokens` is refused at construction (`overflow="refuse"`,
    naming it) or left out and counted (`overflow="drop"`, `samples_dropped`). Shuffle,
    rank sharding with equal steps and exact resume are TokenLoader's, and so are mixtures:
    `path` a list or dict of datasets (image conversations, or plain chat SFT made by
    `convert text`) with `weights=`, `weight_by`, `epoch_size`; a batch then gains `source`
    (docs/vlm.md).
    """

    def __init__(self, path: str | Path | Sequence[str | Path] | Mapping[str, str | Path],
                 max_tokens: int, *, preset: str = "qwen2_vl",
                 min_pixels: int | None = None, max_pixels: int | None = None,
                 overflow: str = "refuse", shuffle: bool = True, seed: int = 0,
                 num_workers: int = 0, rank: int | None = None,
                 world_size: int | None = None, device: str | torch.device = "cpu",
                 prefetch: int = 2, persistent: bool = True, pack_window: int = 4096,
                 plan_window: int | None = None, verify: str = "cheap",
                 fields: Iterable[str] | None = None, weights: ScheduleArg | None = None,
                 weight_by: str = "tokens", epoch_size: int | None = None,
                 reweight: bool = False) -> None:
        super().__init__(describe(path), fields)
        epoch_size = check_optional("epoch_size", epoch_size, minimum=1)
        mixing = check_mixture_arguments(path, weights, epoch_size, reweight, None, None)
        if preset not in PRESETS:
            raise ArgumentError(f"preset must be one of {PRESETS}, got {preset!r}")
        if overflow not in OVERFLOW:
            raise ArgumentError(f"overflow must be one of {OVERFLOW}, got {overflow!r}")
        given = {k: v for k, v in {"min_pixels": min_pixels, "max_pixels": max_pixels}.items()
                 if v is not None}
        self.settings = resolve_preset(preset, given).patches
        self.geometry = self.settings.geometry
        self.path = mixing.sources.locations if mixing else resolve_location(path)
        verify = check_verify_mode(verify)
        self.max_tokens = check_counter("max_tokens", max_tokens, minimum=1)
        self.seed, self.shuffle = check_counter("seed", seed), check_flag("shuffle", shuffle)
        num_workers = check_counter("num_workers", num_workers)
        prefetch = check_counter("prefetch", prefetch, minimum=1)
        self.pack_window = check_counter("pack_window", pack_window, minimum=1)
        plan_window = check_optional("plan_window", plan_window, minimum=1)
        self.rank, self.world_size = resolve_rank(rank, world_size)
        self._group_implicit = rank is None and world_size is None
        self.device = resolve_device(device)
        self.preset = preset
        sources = read_sources(self.path, mixing, verify, self.geometry)
        self.lengths, self._manifest = sources.combined, sources.fingerprint
        self.num_samples = len(self.lengths)
        self._check_fits(overflow)
        drop = Overflow(self.max_tokens, "drop") if overflow == "drop" else None
        self.mixing = None if mixing is None else self._mixing(mixing, sources.lengths, drop,
                                                               weight_by, epoch_size)
        self._check_fields(BATCH_KEYS + ((SOURCE_FIELD,) if self.mixing else ()))
        self.plan_window = plan_window or int(np.clip(
            WINDOW_BATCHES * self.max_tokens / max(1.0, float(self.lengths.mean())),
            1 << 10, 1 << 18))
        self._planner = TokenEpochPlanner(
            "packed", self.max_tokens, None, 0, 1, 1, 1, 1, self.pack_window,
            self.plan_window, self.shuffle, self.seed, drop, self.lengths, self.mixing)
        self.tokens_seen = self.loss_tokens_seen = 0
        self._start_producer(verify, num_workers, prefetch, persistent)

    def _mixing(self, mixing: Any, lengths: list[np.ndarray], drop: Overflow | None,
                weight_by: str, epoch_size: int | None) -> TokenMixing:
        """A mixture's sources weighed as TokenLoader weighs them, by each sample's tokens
        with its images expanded (a dropped sample: none)."""
        return TokenMixing(mixing, [drop.kept_lengths(n) if drop else n for n in lengths],
                           weight_by, epoch_size, self.seed, self.shuffle,
                           step_unit(weight_by, self.max_tokens, None, None, self.world_size),
                           [min(int(n.max()), self.max_tokens) for n in lengths])

    def _start_producer(self, verify: str, num_workers: int, prefetch: int,
                        persistent: bool) -> None:
        # A batch of image tokens only is the most patches one holds: merge² per token.
        capacity = self.max_tokens * self.geometry.merge_size ** 2
        self.spec = VLMBatchSpec(self.path, self.settings, capacity, self.max_tokens, verify)
        # Every field that views the batch buffer: one registration covers them all.
        self._feed = DeviceFeed(self.device, pin=("pixel_values", *ROWS, "position_ids"),
                                record_stages=True)
        self._producer = BatchProducer(functools.partial(VLMBatchBuilder, self.spec),
                                       num_workers, prefetch, self.spec.slot_nbytes(),
                                       persistent)
        self._producer.check_memory(self._passes.owner, f"a batch of up to {capacity:,} "
                                    f"patches of {self.settings.patch_dim} floats and "
                                    f"{self.max_tokens:,} tokens",
                                    "max_tokens, num_workers or prefetch")

    def _check_fits(self, overflow: str) -> None:
        over = np.flatnonzero(self.lengths > self.max_tokens)
        self.samples_dropped = len(over) if overflow == "drop" else 0
        if overflow == "refuse" and len(over):
            first = int(over[0])
            raise ArgumentError(
                f"{describe(self.path)}: sample {first} is {int(self.lengths[first])} tokens "
                f"with its images expanded, more than max_tokens={self.max_tokens} ("
                f"{len(over)} such samples); raise max_tokens, lower max_pixels, or pass "
                "overflow='drop' (a sample's image tokens are never split)")
        if len(over) == len(self.lengths):
            raise ArgumentError(f"{describe(self.path)}: every sample is longer than "
                                f"max_tokens={self.max_tokens}")

    # --- iteration -----------------------------------------------------------------------

    def _pass_batches(self) -> Iterator[dict[str, Any]]:
        epoch, start = self._begin_epoch()
        plan = self._plan(epoch)
        host = self._host_batches(plan, epoch, start)
        for b, batch in self._feed.batches(host):
            self._report(b, **self._feed.take_stages(b))
            self._handed_out(b, plan)
            if not plan.padding(b):  # counted as handed out, not as built ahead
                self.tokens_seen += batch["num_real_tokens"]
                self.loss_tokens_seen += batch["num_loss_tokens"]
            yield batch
        self._finish_empty(start, plan)

    def _host_batch(self, b: int, meta: dict[str, Any], slot: torch.Tensor,
                    plan: WindowedRankPlan) -> dict[str, Any]:
        """Views of the buffer the worker filled (copied to a GPU in place): nothing computed
        per token here."""
        tokens, buffer = meta["tokens"], slot.numpy()
        rows = slot_view(slot, self.spec.token_rows(buffer))[:, :tokens]
        batch = {name: rows[row][None] for name, row in ROWS.items()}
        batch["position_ids"] = rows[POSITIONS][:, None]
        batch.update(
            cu_seqlens=torch.from_numpy(meta["cu_seqlens"]), max_seqlen=meta["max_seqlen"],
            pixel_values=slot_view(slot, self.spec.pixels(buffer)[:meta["patches"]]),
            image_grid_thw=grid_tensor(meta["grids"], "image_grid_thw"),
            index=torch.from_numpy(np.asarray(meta["index"], dtype=np.int64)),
            is_padding=torch.from_numpy(np.asarray(meta["is_padding"], dtype=bool)),
            num_real_tokens=tokens, num_loss_tokens=meta["loss_tokens"],
            efficiency=tokens / self.max_tokens)
        if SOURCE_FIELD in meta:
            batch[SOURCE_FIELD] = torch.from_numpy(meta[SOURCE_FIELD])
        return batch

    # --- state ---------------------------------------------------------------------------

    def progress(self) -> dict[str, dict[str, int]]:
        """Samples given so far, all ranks together, and the tokens of this epoch so far."""
        position = self._position
        start = self._epoch_start(position.epoch)
        if self.mixing is not None:
            return self.mixing.progress(position, self.world_size, start)
        samples, tokens = start.drawn_by(position.segments, position.batches_done,
                                         self.world_size, position.epoch)
        return {describe(self.path): {"samples": samples + position.epoch * self.num_samples,
                                      "tokens_this_epoch": tokens}}

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["tokens_seen"], state["loss_tokens_seen"] = self.tokens_seen, self.loss_tokens_seen
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        seen = [check_counter(f"load_state_dict: the state's {name}",
                              state.get(name, 0) if isinstance(state, dict) else 0)
                for name in ("tokens_seen", "loss_tokens_seen")]
        super().load_state_dict(state)
        self.tokens_seen, self.loss_tokens_seen = seen

    def _epoch_amount_bound(self) -> int:
        return int(self.lengths.sum())

    def _identity(self) -> dict[str, Any]:
        identity = self._own_identity()
        if self.mixing is not None:
            identity.update(self.mixing.identity())
        return identity

    def _own_identity(self) -> dict[str, Any]:
        return {"num_samples": self.num_samples, "preset": self.preset,
                "max_tokens": self.max_tokens, "min_pixels": self.geometry.min_pixels,
                "max_pixels": self.geometry.max_pixels, "shuffle": self.shuffle,
                "seed": self.seed, "rank": self.rank, "world_size": self.world_size,
                "pack_window": self.pack_window, "plan_window": self.plan_window,
                "manifest": self._manifest}
