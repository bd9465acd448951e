"""What TokenLoader plans and reads beside its batches: a rank's plan in the shape the batch
producer asks for, the checks a text dataset passes before it is read, and metadata columns
aligned with a batch's sequences."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from datapipe.errors import ArgumentError, DataError
from datapipe.format.dataset import Dataset
from datapipe.loader.base import refuse_empty
from datapipe.loader.token_batches import LOSS_MASK
from datapipe.sampling.elastic import is_count
from datapipe.sampling.overflow import Overflow
from datapipe.sampling.token_windows import RankWindows, WindowStart
from datapipe.sampling.tokens import LAYOUTS, TokenPlan, check_fits_padded, round_up
from datapipe.text.index import LengthSummary

# A window of the epoch's order holds about this many batches of documents (at their mean
# length): each window's last batch is part-filled, so more batches per window cost less
# packing, and fewer cost less planning. The bounds keep a window's planning to ~0.1-0.2 s.
WINDOW_BATCHES = 256
WINDOW_DOCUMENTS = (1 << 12, 1 << 19)


def segment_ranges(plan: TokenPlan, b: int, lengths: np.ndarray | None) -> dict[str, Any]:
    """A batch's token ranges and rows, as the batch builder asks for them (`cut`: the pieces
    that end before their document does, when `lengths` are given)."""
    doc, start, end, rows = plan.batch(b)
    cut = None if lengths is None else lengths[doc] > end  # split pieces
    return {"start": start, "end": end, "rows": rows, "cut": cut}


@dataclass(frozen=True)
class WindowedRankPlan:
    """A rank's batches of an epoch planned a window at a time (sampling/token_windows.py),
    in the shape the batch producer asks for. Its length is known only by planning the epoch
    to its end: the producer asks `has(b)` instead."""

    rank_windows: RankWindows
    lengths: np.ndarray | None = None  # per document; None: no piece carries a target on

    def __len__(self) -> int:
        return len(self.rank_windows)

    def has(self, b: int) -> bool:
        return self.rank_windows.has(b)

    def is_last(self, b: int) -> bool:
        return self.rank_windows.is_last(b)

    def padding(self, b: int) -> bool:
        return self.rank_windows.padding(b)

    def batch(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        at = self.rank_windows.located(b)
        doc = at.plan.batch(at.local)[0]
        return doc, np.full(len(doc), self.padding(b))

    def extra(self, b: int) -> dict[str, Any]:
        at = self.rank_windows.located(b)
        return segment_ranges(at.plan, at.local, self.lengths)


def largest_total(columns: list[np.ndarray], k: int, chunk: int = 1 << 22) -> int:
    """The sum of the k largest values over every column, a chunk at a time: a partition per
    chunk keeps k candidates, never a sorted copy of the corpus."""
    best = np.zeros(0, dtype=np.int64)
    for column in columns:
        for i in range(0, len(column), chunk):
            candidates = np.concatenate([best, np.asarray(column[i:i + chunk], dtype=np.int64)])
            best = candidates if len(candidates) <= k else np.partition(candidates, -k)[-k:]
    return int(best.sum())


def check_padded_fit(lengths: np.ndarray, summary: LengthSummary, overflow: Overflow | None,
                     max_tokens: int, pad_to_multiple_of: int) -> None:
    """Every document the padded layout plans fits max_tokens alone: when the longest does,
    all do, with no pass over a billion lengths; else the first that does not is named."""
    longest = summary.longest if overflow is None else min(summary.longest, overflow.cap)
    if round_up(longest, pad_to_multiple_of) <= max_tokens:
        return  # (padded refuses overflow="split": what is longer than the cap is cut or gone)
    order = np.arange(len(lengths))  # (a mixture's lengths gather by combined id)
    lengths = np.asarray(lengths[order])
    if overflow is not None:
        order, lengths = overflow.apply(order, lengths)
        lengths = lengths[order]
    check_fits_padded(lengths, max_tokens, pad_to_multiple_of)


def rows_per_batch(batch_size: int | None, max_tokens: int | None, seq_len: int,
                   batch_multiple_of: int) -> int:
    """Rows of a fixed-layout batch: batch_size, or as many rows of seq_len as the budget
    holds, rounded down to batch_multiple_of where there are that many."""
    rows = batch_size or max(1, (max_tokens or 0) // max(seq_len, 1))
    if rows >= batch_multiple_of:
        rows -= rows % batch_multiple_of
    return rows


def batch_budget(layout: str, max_tokens: int | None, rows: int, seq_len: int) -> int | None:
    """Tokens one batch holds at most (None: only a count of documents bounds it)."""
    return rows * seq_len if layout == "fixed" else max_tokens


def plan_window_size(asked: int | None, batch_budget: int | None,
                     summary: LengthSummary) -> int:
    """Documents per planning window: `asked`, or about WINDOW_BATCHES batches' worth."""
    if asked is not None:
        return asked
    mean = max(1.0, summary.total / max(1, summary.count))
    per_batch = batch_budget / mean if batch_budget else 1.0
    return int(np.clip(WINDOW_BATCHES * per_batch, *WINDOW_DOCUMENTS))


def parse_cursor(saved: Any) -> WindowStart | None:
    """A state's `cursor`: [window, first batch, documents before, tokens before], then for a
    mixture the documents of each source before, and the tokens of each (checked against the
    sources when learned)."""
    if saved is None:
        return None
    if not (isinstance(saved, list) and len(saved) >= 4 and len(saved) % 2 == 0
            and all(map(is_count, saved))):
        raise ArgumentError("load_state_dict: the state's cursor must be [window, batch, "
                            "documents, tokens] (and, for a mixture, documents and tokens per "
                            f"source), counts; got {saved!r}")
    return WindowStart(*saved[:4], tuple(saved[4:]))


def aligned_columns(columns: dict[str, Any], index: torch.Tensor) -> dict[str, Any]:
    """Metadata values (one per segment) one per entry of `index`: a padding sequence (-1: a
    packed batch's tail, a fixed row's free tail) gets 0 or None."""
    if all(len(value) == len(index) for value in columns.values()):
        return columns  # no padding sequence (or no column): nothing to place
    real = index.numpy() >= 0
    out: dict[str, Any] = {}
    for name, value in columns.items():
        if isinstance(value, np.ndarray):
            out[name] = np.zeros((len(real), *value.shape[1:]), value.dtype)
            out[name][real] = value
        else:
            given = iter(value)
            out[name] = [next(given) if is_real else None for is_real in real.tolist()]
    return out


def check_text_dataset(ds: Dataset, tokenizer: str | None) -> None:
    manifest = ds.manifest
    if manifest.kind != "text":
        raise DataError(f"{ds.directory}: a {manifest.kind} dataset; TokenLoader reads text")
    if manifest.settings.get("text_kind") == "vlm":  # its placeholders need their images
        raise DataError(f"{ds.directory}: image conversations (datapipe convert vlm); read "
                        "them with dp.VLMLoader, which expands each image's tokens")
    refuse_empty(ds)
    if LOSS_MASK in manifest.column_names and manifest.column(LOSS_MASK).type != "uint8[]":
        raise DataError(f"{ds.directory}: column {LOSS_MASK!r} is "
                        f"{manifest.column(LOSS_MASK).type}; a loss mask is uint8[], one 0 or 1 "
                        "per token")
    if tokenizer is None:
        return
    stored = manifest.tokenizer or {}
    if tokenizer == "bytes":
        expected = "builtin:bytes-v1"
    else:
        from datapipe.format.hashing import hash_file

        candidate = Path(tokenizer)
        if candidate.is_dir():
            candidate = candidate / "tokenizer.json"
        if not candidate.is_file():
            raise ArgumentError(f"tokenizer {tokenizer!r}: not 'bytes' nor a tokenizer.json")
        expected = hash_file(candidate)
    if stored.get("hash") != expected:
        raise DataError(f"{ds.directory}: tokenized with {stored.get('name', 'unknown')!r} "
                        f"({stored.get('hash')}), not with {tokenizer!r}; reconvert the text or "
                        "name the tokenizer it was made with")


def overflow_policy(layout: str, cap: int | None, mode: str | None, max_tokens: int | None,
                    seq_len: int, pad_to_multiple_of: int) -> Overflow | None:
    """TokenLoader's long-document policy, checked against the layout's budget; None: the
    default (split at the budget; padded refuses)."""
    if mode is None and cap is None:
        return None
    if layout == "padded" and mode in (None, "split"):
        raise ArgumentError(f"overflow={mode!r}: layout='padded' never splits a document; "
                            "give overflow='truncate' or 'drop'")
    budget = {"packed": max_tokens and max_tokens // pad_to_multiple_of * pad_to_multiple_of,
              "fixed": seq_len, "padded": max_tokens}[layout]
    need = cap if cap is None or layout != "padded" else round_up(cap, pad_to_multiple_of)
    if budget is not None and need is not None and need > budget:
        raise ArgumentError(f"max_seq_len={cap} is more than one batch holds "
                            f"({'seq_len' if layout == 'fixed' else 'max_tokens'}="
                            f"{budget}); lower it or raise the budget")
    if cap is None and budget is None:
        raise ArgumentError(f"overflow={mode!r} needs max_seq_len (no max_tokens to cap at)")
    if cap is None and layout == "padded":  # a row padded to the multiple stays in the budget
        cap = budget // pad_to_multiple_of * pad_to_multiple_of
    return Overflow(cap or budget, mode or "split")


def check_layout(layout: str, max_tokens: int | None, batch_size: int | None, seq_len: int,
                 pad_to_multiple_of: int) -> None:
    """How TokenLoader's (already integer) layout settings fit together."""
    if layout not in LAYOUTS:
        raise ArgumentError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if max_tokens is None and batch_size is None:
        raise ArgumentError("give max_tokens (a token budget) or batch_size")
    if layout == "fixed":
        if seq_len < 1:
            raise ArgumentError("layout='fixed' needs seq_len >= 1")
        if max_tokens is not None and max_tokens < seq_len:
            raise ArgumentError(f"max_tokens={max_tokens} is smaller than one row of "
                                f"seq_len={seq_len}")
    if layout in ("packed", "padded") and max_tokens is not None and \
            max_tokens < pad_to_multiple_of:
        raise ArgumentError(f"max_tokens={max_tokens} is smaller than "
                            f"pad_to_multiple_of={pad_to_multiple_of}")
