"""`TokenLoader`: token-budget batches of pre-tokenized documents, padding-free or not."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from datapipe.format.concat import SOURCE_FIELD, CombinedColumn, ConcatDataset, open_dataset
from datapipe.format.integrity import check_verify_mode
from datapipe.format.sources import resolve_location
from datapipe.loader.arguments import check_counter, check_flag, check_optional
from datapipe.loader.batch_loop import BatchProducer
from datapipe.loader.device import prefetch_to_device, resolve_device
from datapipe.loader.distributed import resolve_rank
from datapipe.loader.extra_columns import add_to_batch
from datapipe.loader.extra_columns import choose as extra_column_names
from datapipe.loader.mixing import check_mixture_arguments, describe
from datapipe.loader.progress_state import manifest_fingerprint
from datapipe.loader.token_batches import LOSS_MASK, TokenBatchBuilder, split_slot
from datapipe.loader.token_epochs import TokenEpochPlanner
from datapipe.loader.token_mixing import TokenMixing, step_unit
from datapipe.loader.token_plans import (
    WindowedRankPlan,
    aligned_columns,
    batch_budget,
    check_layout,
    check_padded_fit,
    check_text_dataset,
    largest_total,
    overflow_policy,
    plan_window_size,
    rows_per_batch,
)
from datapipe.loader.windowed_loader import WindowedLoader
from datapipe.sampling.mixture_weights import ScheduleArg
from datapipe.sampling.token_windows import TokenStream
from datapipe.text.collate import CollateOptions, Gathered, collate
from datapipe.text.fields import OPTIONAL_FIELDS, resolve
from datapipe.text.index import LengthSummary, length_index

# The keys of a batch, per layout (see datapipe.text.collate), for `fields`.
BATCH_KEYS = {
    "packed": ("input_ids", "labels", "position_ids", "cu_seqlens", "max_seqlen"),
    "padded": ("input_ids", "labels", "attention_mask"),
    "fixed": ("input_ids", "labels", "position_ids", "attention_mask", "cu_seqlens",
              "max_seqlen"),
}
COMMON_KEYS = ("num_real_tokens", "num_loss_tokens", "efficiency", "index", "is_padding")


class TokenLoader(WindowedLoader):
    """Batches of documents from a datapipe text dataset, sized by a token budget.

    layout="packed": `input_ids` (1-D, all documents back to back), `cu_seqlens` (int32),
    `position_ids`, `max_seqlen`, shifted `labels` (-100 across document ends): no padding.
    layout="padded": length-bucketed rows padded to the longest (rounded up to
    `pad_to_multiple_of`), with `attention_mask`. layout="fixed": rows of exactly `seq_len`
    built by best-fit-decreasing packing, with `cu_seqlens`/`position_ids` per document.
    Every batch has `index` (document ids in order), `is_padding` (a repeated batch that
    evens out ranks), `num_real_tokens` and `efficiency` (real tokens / tokens computed), plus
    the dataset's metadata columns (`extra_columns`, default all but `tokens` and `length`),
    one value per entry of `index`: a tensor for numbers and fixed-shape arrays, else a list.
    `fields=("input_ids", "labels")` yields that tuple instead of the dict.

    `preset="hf" | "varlen" | "flex" | "megatron"` shapes batches for that stack (layout,
    `labels` convention, (1, T) tensors, optional fields such as `seq_idx` or
    `cu_seq_lens_q`); `labels`, `batch_dim` and `add_fields` set them one by one (see
    datapipe.text.fields and docs/text.md). `num_loss_tokens` counts the targets that count;
    `loss_tokens_seen` sums it over the batches handed out. A dataset with a `loss_mask`
    column (supervised fine-tuning) has the targets it masks set to -100.

    `max_seq_len` caps one sequence (default: the budget); `overflow` says what a longer
    document becomes: "split" (packed and fixed: pieces, each piece's last target the next
    piece's first token, `continue_positions=True` numbering positions on), "truncate" or
    "drop" (counted in `documents_dropped` and `tokens_dropped`, and warned of).

    verify="cheap" (the default) checks each shard's token offsets and lengths as it is opened
    and every batch's ids against the vocabulary size, in the workers; verify="open" also hashes
    every shard against the manifest when the loader is made (once: workers inherit the result).
    A failed check is a `DataError` naming the shard, row and document.

    The epoch is planned `plan_window` documents at a time (default: about 256 batches'
    worth) over a shuffle computed per position, so start-up and memory do not grow with the
    corpus; `len()` walks the whole epoch (docs/text.md, "Corpora of any size").

    `path` may be a URL, read through a node-local cache (`cache_dir`, `cache_size`): as for
    `Loader`, see docs/REMOTE.md.

    `path` may also name several datasets (a list, or a dict name -> path) mixed by
    `weights=`: by tokens (`weight_by="tokens"`, how LLM blends are given) or by documents,
    over epochs of `epoch_size` tokens or documents (default: all of them). A batch may hold
    documents of several sources; it gains `source` (int64, aligned with `index`, -1 where
    `index` is), and `index` is the document's id within its own dataset. See
    docs/mixtures.md.
    """

    def __init__(self, path: str | Path | Sequence[str | Path] | Mapping[str, str | Path],
                 max_tokens: int | None = None, *,
                 batch_size: int | None = None, layout: str | None = None, seq_len: int = 0,
                 shuffle: bool = True, seed: int = 0, num_workers: int = 0,
                 pad_to_multiple_of: int = 1, batch_multiple_of: int = 1, pad_id: int = 0,
                 tokenizer: str | None = None, rank: int | None = None,
                 world_size: int | None = None, device: str | torch.device = "cpu",
                 prefetch: int = 4, persistent: bool = True, bucket_batches: int = 64,
                 pack_window: int = 16384, plan_window: int | None = None,
                 verify: str = "cheap",
                 cache_dir: str | Path | None = None, cache_size: int | str | None = None,
                 fields: Iterable[str] | None = None,
                 extra_columns: tuple[str, ...] | None = None, preset: str | None = None,
                 labels: str | None = None, batch_dim: bool | None = None,
                 add_fields: Iterable[str] = (), continue_positions: bool = False,
                 max_seq_len: int | None = None, overflow: str | None = None,
                 weights: ScheduleArg | None = None, weight_by: str = "tokens",
                 epoch_size: int | None = None, reweight: bool = False) -> None:
        super().__init__(describe(path), fields)
        epoch_size = check_optional("epoch_size", epoch_size, minimum=1)
        mixing = check_mixture_arguments(path, weights, epoch_size, reweight, cache_dir,
                                         cache_size)
        continue_positions = check_flag("continue_positions", continue_positions)
        if batch_dim is not None:
            batch_dim = check_flag("batch_dim", batch_dim)
        asked = tuple(f for f in fields or () if f in OPTIONAL_FIELDS)  # `fields` asks too
        layout, self.batch_fields = resolve(preset, layout, labels, batch_dim,
                                            (*add_fields, *asked), continue_positions)
        self.path = (mixing.sources.locations if mixing
                     else resolve_location(path, cache_dir, cache_size))
        verify = check_verify_mode(verify)
        seed = check_counter("seed", seed)
        num_workers = check_counter("num_workers", num_workers)
        pad_id = check_counter("pad_id", pad_id)  # a negative id breaks embedding lookups
        prefetch = check_counter("prefetch", prefetch, minimum=1)
        shuffle, persistent = check_flag("shuffle", shuffle), check_flag("persistent", persistent)
        self.layout, self.shuffle, self.seed = layout, shuffle, seed
        self.seq_len = check_counter("seq_len", seq_len)
        self.max_tokens = check_optional("max_tokens", max_tokens, minimum=1)
        self.batch_size = check_optional("batch_size", batch_size, minimum=1)
        self.pad_to_multiple_of = check_counter("pad_to_multiple_of", pad_to_multiple_of,
                                                minimum=1)
        self.batch_multiple_of = check_counter("batch_multiple_of", batch_multiple_of, minimum=1)
        self.bucket_batches = check_counter("bucket_batches", bucket_batches, minimum=1)
        self.pack_window = check_counter("pack_window", pack_window, minimum=1)
        plan_window = check_optional("plan_window", plan_window, minimum=1)
        check_layout(self.layout, self.max_tokens, self.batch_size, self.seq_len,
                     self.pad_to_multiple_of)
        self.overflow = overflow_policy(self.layout, check_optional("max_seq_len", max_seq_len,
                                                                    minimum=1), overflow,
                                        self.max_tokens, self.seq_len, self.pad_to_multiple_of)
        self.rank, self.world_size = resolve_rank(rank, world_size)
        self._group_implicit = rank is None and world_size is None
        self.device = resolve_device(device)
        self.collate_options = CollateOptions(layout, pad_id, self.pad_to_multiple_of,
                                              self.seq_len, self.batch_fields)
        extras = self._read_datasets(mixing, verify, tokenizer, extra_columns)
        self.mixing = None if mixing is None else TokenMixing(
            mixing, [self.overflow.kept_lengths(n) if self.overflow else n
                     for n in self.source_lengths], weight_by, epoch_size, seed, shuffle,
            step_unit(weight_by, self.max_tokens, self.batch_size,
                      self._rows_per_batch() * self.seq_len if layout == "fixed" else None,
                      self.world_size),
            [s.longest if self.overflow is None else min(s.longest, self.overflow.cap)
             for s in self.source_summaries],
            None if self.overflow else [s.total for s in self.source_summaries])
        self._check_fields(BATCH_KEYS[layout] + COMMON_KEYS + extras
                           + tuple(sorted(self.batch_fields.optional))
                           + ((SOURCE_FIELD,) if self.mixing else ()))
        self.num_documents = len(self.lengths)
        self._report_overflow()
        if layout == "padded" and max_tokens is not None:
            check_padded_fit(self.lengths, self.length_summary, self.overflow, max_tokens,
                             pad_to_multiple_of)
        self.plan_window = plan_window_size(plan_window, self._batch_budget(),
                                            self.length_summary)
        self._planner = TokenEpochPlanner(
            layout, self.max_tokens, self.batch_size, self.seq_len, self._rows_per_batch(),
            self.pad_to_multiple_of, self.batch_multiple_of, self.bucket_batches,
            self.pack_window, self.plan_window, shuffle, seed, self.overflow, self.lengths,
            self.mixing, plan_ahead=num_workers > 0)
        self._tokens_seen = self._tokens_computed = self._loss_tokens_seen = 0
        tokens = self._max_batch_tokens()
        self._producer = BatchProducer(
            functools.partial(TokenBatchBuilder, self.path, verify, extras), num_workers,
            prefetch, tokens * (self.token_dtype.itemsize + self.has_loss_mask), persistent)
        self._producer.check_memory(self._passes.owner, f"a batch of up to {tokens:,} tokens "
                                    f"({self.token_dtype})", "max_tokens (or batch_size, or "
                                    "seq_len), num_workers or prefetch")

    def _read_datasets(self, mixing: Any, verify: str, tokenizer: str | None,
                       extra_columns: tuple[str, ...] | None) -> tuple[str, ...]:
        """Check the dataset (or a mixture's datasets), take the document lengths (each
        source's, and all of them in combined order) and return the extra columns."""
        with open_dataset(self.path, verify=verify) as ds:
            parts = ds.sources if isinstance(ds, ConcatDataset) else [ds]
            if mixing:
                mixing.check(parts, "text")
            for part in parts:
                check_text_dataset(part, tokenizer)
                if verify == "open":
                    part.check_hashes()  # here, before workers fork: each shard hashed once
            indexes = [length_index(part) for part in parts]
            self.source_lengths = [lengths for lengths, _ in indexes]
            self.source_summaries = [summary for _, summary in indexes]
            # Memory-mapped indexes themselves (no private copy of N lengths); a mixture's
            # gathered by combined id from each source's.
            counts = np.cumsum([len(n) for n in self.source_lengths])
            self.lengths = (self.source_lengths[0] if len(parts) == 1 else CombinedColumn(
                self.source_lengths, np.concatenate([[0], counts]).astype(np.int64)))
            self.length_summary = LengthSummary.joined([summary for _, summary in indexes])
            self.token_dtype = ds.manifest.column("tokens").numpy_dtype
            self.has_loss_mask = LOSS_MASK in ds.manifest.column_names
            standard = {"tokens", "length", LOSS_MASK}
            if mixing:
                self._manifest: Any = mixing.fingerprints(parts)
                return mixing.extra_columns(parts, extra_columns, standard)
            self._manifest = manifest_fingerprint(ds.manifest)
            return extra_column_names(ds.manifest, extra_columns, standard)

    def _report_overflow(self) -> None:
        """Documents and tokens the policy leaves out of every epoch: counted, and said once."""
        each = [self.overflow.dropped(n) for n in self.source_lengths] if self.overflow else []
        self.documents_dropped = sum(d for d, _ in each)
        self.tokens_dropped = sum(t for _, t in each)
        if self.tokens_dropped:
            warnings.warn(f"{describe(self.path)}: overflow={self.overflow.mode!r} leaves out "
                          f"{self.documents_dropped:,} documents and {self.tokens_dropped:,} "
                          f"tokens of every epoch (longer than max_seq_len={self.overflow.cap})",
                          RuntimeWarning, stacklevel=3)

    def _rows_per_batch(self) -> int:
        return rows_per_batch(self.batch_size, self.max_tokens, self.seq_len,
                              self.batch_multiple_of)

    def _batch_budget(self) -> int | None:
        return batch_budget(self.layout, self.max_tokens, self._rows_per_batch(), self.seq_len)

    def _max_batch_tokens(self) -> int:
        """Upper bound on real tokens in one batch, the size of its buffer: the budget (or the
        batch_size longest documents'), never more than the corpus (max_tokens=10**12 over
        2 M tokens is 2 M)."""
        budget = self._batch_budget()
        if budget is None:
            budget = largest_total(self.source_lengths, self.batch_size)
        total = self.mixing.max_epoch_tokens() if self.mixing else self.length_summary.total
        return max(1, min(budget, total))

    # --- plans ---------------------------------------------------------------------------

    def _rank_plan(self, rest: TokenStream, epoch: int) -> WindowedRankPlan:
        return self._planner.rank_plan(rest, self.rank, self.world_size)

    # --- iteration -----------------------------------------------------------------------

    def _pass_batches(self) -> Iterator[dict[str, Any]]:
        epoch, start = self._begin_epoch()
        plan = self._plan(epoch)
        host = self._host_batches(plan, epoch, start)
        for b, batch in prefetch_to_device(host, self.device):
            self._report(b)
            self._handed_out(b, plan)
            if not batch["is_padding"]:  # counted as handed out, not as built ahead
                self._loss_tokens_seen += batch["num_loss_tokens"]
            yield batch
        self._finish_empty(start, plan)

    def _host_batch(self, b: int, meta: dict[str, Any], slot: torch.Tensor,
                    plan: WindowedRankPlan) -> dict[str, Any]:
        # The collate writes new arrays (the layouts' rows): nothing views the buffer.
        tokens, mask = split_slot(slot.numpy(), self.token_dtype, self.has_loss_mask)
        count = meta["count"]
        pieces = Gathered(np.asarray(meta["index"], dtype=np.int64),
                          np.asarray(meta["seg_starts"], dtype=np.int64), meta["after"],
                          None if mask is None else mask[:count], meta.get(SOURCE_FIELD))
        batch = collate(tokens[:count], np.asarray(meta["seg_lengths"], dtype=np.int64),
                        np.asarray(meta["rows"], dtype=np.int64), self.collate_options,
                        pieces)
        batch["is_padding"] = plan.padding(b)
        add_to_batch(batch, aligned_columns(meta["columns"], batch["index"]))
        if not batch["is_padding"]:
            self._tokens_seen += batch["num_real_tokens"]
            self._tokens_computed += batch["input_ids"].numel()
        return batch

    def progress(self) -> dict[str, dict[str, int]]:
        """Documents and tokens each source of a mixture gave so far, all ranks together:
        the epochs before this one whole, then this one up to the last batch handed out (also
        in the state dict, as `progress`). One dataset counts as one source."""
        position = self._position
        start = self._epoch_start(position.epoch)
        if self.mixing is not None:
            return self.mixing.progress(position, self.world_size, start)
        documents, tokens = start.drawn_by(position.segments, position.batches_done,
                                        self.world_size, position.epoch)
        per_epoch = (self.num_documents - self.documents_dropped,
                     self.length_summary.total - self.tokens_dropped)
        return {describe(self.path): {"documents": documents + position.epoch * per_epoch[0],
                                      "tokens": tokens + position.epoch * per_epoch[1]}}

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["loss_tokens_seen"] = self._loss_tokens_seen
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # A state saved before it was kept carries none: the running total starts over.
        seen = check_counter("load_state_dict: the state's loss_tokens_seen",
                             state.get("loss_tokens_seen", 0) if isinstance(state, dict) else 0)
        super().load_state_dict(state)
        self._loss_tokens_seen = seen

    def _epoch_amount_bound(self) -> int:
        return self.length_summary.total

    @property
    def loss_tokens_seen(self) -> int:
        """Targets that counted, over all real batches handed out so far (padding repeats
        excluded): the denominator for a loss summed over several accumulated batches."""
        return self._loss_tokens_seen

    @property
    def efficiency(self) -> float:
        """Running padding efficiency: real tokens / tokens computed, over all batches so far."""
        return self._tokens_seen / self._tokens_computed if self._tokens_computed else 1.0

    def _identity(self) -> dict[str, Any]:
        identity = {"num_documents": self.num_documents, "layout": self.layout,
                    "max_tokens": self.max_tokens, "batch_size": self.batch_size,
                    "seq_len": self.seq_len, "shuffle": self.shuffle, "seed": self.seed,
                    "rank": self.rank, "world_size": self.world_size,
                    "pad_to_multiple_of": self.pad_to_multiple_of,
                    "batch_multiple_of": self.batch_multiple_of, "manifest": self._manifest}
        if self.mixing is not None:
            identity.update(self.mixing.identity())
        if self.overflow is not None:  # only when set: a state saved before reads the same
            identity["overflow"] = [self.overflow.mode, self.overflow.cap]
        # What else shapes this layout's batches (only there: elsewhere they change nothing).
        if self.layout == "padded":
            identity["bucket_batches"] = self.bucket_batches
        elif self.layout == "fixed":
            identity["pack_window"] = self.pack_window
        identity["plan_window"] = self.plan_window
        return identity
