"""Which keys a token batch carries, and in which convention: one choice per training stack.

A *preset* names a stack and sets the layout, the `labels` convention, the packed tensors'
shape and the optional fields that stack reads; each of them can also be set on its own.
Setting one that a preset fixes to another value is an error naming both, never a silent pick.

`use_cache` is a constant, False: a transformers model left at its config's default
`use_cache=True` builds a KV cache even in a training forward, and with a cache its causal mask
no longer reads document boundaries from `position_ids` (masking_utils packs only when there
is no cache), so a packed row's documents would attend to each other. The key turns that off
per forward, for a model built however it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from datapipe.errors import ArgumentError

# Fields a batch carries only when asked for (by `add_fields`, `fields` or a preset).
FLASH_FIELDS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")  # HF's names
VARLEN_FIELDS = ("cu_seq_q", "cu_seq_k", "max_q", "max_k")  # torch.nn.attention.varlen's
OPTIONAL_FIELDS = ("seq_idx", *FLASH_FIELDS, *VARLEN_FIELDS, "shift_labels", "loss_mask",
                   "segment_start", "use_cache")
# Fields that describe the documents inside a row: the padded layout has one per row.
DOCUMENT_FIELDS = ("seq_idx", *FLASH_FIELDS, *VARLEN_FIELDS, "segment_start")
LABEL_STYLES = ("shifted", "hf")

PRESETS: dict[str, dict[str, Any]] = {
    # transformers' DataCollatorWithFlattening(return_flash_attn_kwargs=True,
    # return_seq_idx=True): (1, T) tensors, unshifted labels, the flash-attention kwargs; and
    # use_cache=False, without which a default-built model attends across documents.
    "hf": {"layout": "packed", "labels": "hf", "batch_dim": True,
           "fields": ("seq_idx", *FLASH_FIELDS, "use_cache")},
    # torch.nn.attention.varlen.varlen_attn(q, k, v, cu_seq_q, cu_seq_k, max_q, max_k).
    "varlen": {"layout": "packed", "labels": "shifted", "batch_dim": False,
               "fields": VARLEN_FIELDS},
    # FlexAttention: a document mask_mod reads seq_idx[b, q] == seq_idx[b, kv].
    "flex": {"layout": "packed", "labels": "shifted", "batch_dim": True, "fields": ("seq_idx",)},
    # Megatron-style (B, S) rows: shifted labels, a float loss_mask, cu_seqlens over the
    # flattened batch for PackedSeqParams.
    "megatron": {"layout": "fixed", "labels": "shifted", "batch_dim": False,
                 "fields": ("loss_mask", "seq_idx")},
}


@dataclass(frozen=True)
class BatchFields:
    """What the collate adds to today's keys: `labels` in the "shifted" convention (labels[i]
    is the token after input_ids[i]) or HF's ("hf": labels[i] is input_ids[i], -100 at each
    sequence's first token; the model shifts), packed tensors as (1, T) (`batch_dim`),
    positions that continue across the pieces of a split document, and optional fields."""

    labels: str = "shifted"
    batch_dim: bool = False
    continue_positions: bool = False
    optional: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.labels not in LABEL_STYLES:
            raise ArgumentError(f"labels must be one of {LABEL_STYLES}, got {self.labels!r}")
        unknown = sorted(self.optional - set(OPTIONAL_FIELDS))
        if unknown:
            raise ArgumentError(f"add_fields: no field {unknown[0]!r} (optional fields: "
                                f"{', '.join(OPTIONAL_FIELDS)})")

    def wants(self, name: str) -> bool:
        return name in self.optional


def resolve(preset: str | None, layout: str | None, labels: str | None,
            batch_dim: bool | None, add_fields: Iterable[str],
            continue_positions: bool) -> tuple[str, BatchFields]:
    """(layout, fields) from a preset and the explicit settings; a setting that contradicts
    the preset is an `ArgumentError` naming both."""
    given = {"layout": layout, "labels": labels, "batch_dim": batch_dim}
    if preset is None:
        chosen = {"layout": "packed", "labels": "shifted", "batch_dim": False, "fields": ()}
    elif preset in PRESETS:
        chosen = PRESETS[preset]
    else:
        raise ArgumentError(f"preset must be one of {tuple(PRESETS)}, got {preset!r}")
    for name, value in given.items():
        if value is None:
            continue
        if preset is not None and value != chosen[name]:
            raise ArgumentError(f"preset={preset!r} sets {name}={chosen[name]!r}, but "
                                f"{name}={value!r} was given; drop one of them")
        chosen = {**chosen, name: value}
    if isinstance(add_fields, str) or not all(isinstance(f, str) for f in add_fields):
        raise ArgumentError(f"add_fields must be a tuple of field names, got {add_fields!r}")
    fields = BatchFields(chosen["labels"], chosen["batch_dim"], continue_positions,
                         frozenset(chosen["fields"]) | frozenset(add_fields))
    _check_layout(chosen["layout"], fields)
    return chosen["layout"], fields


def _check_layout(layout: str, fields: BatchFields) -> None:
    if fields.batch_dim and layout != "packed":
        raise ArgumentError(f"batch_dim=True shapes packed tensors as (1, T); layout={layout!r} "
                            "already has rows")
    if layout == "padded":
        per_document = sorted(fields.optional & set(DOCUMENT_FIELDS))
        if per_document:
            raise ArgumentError(f"add_fields: {per_document[0]!r} describes the documents "
                                "packed in a row; layout='padded' has one document per row")
        if fields.continue_positions:
            raise ArgumentError("continue_positions=True: layout='padded' never splits a "
                                "document, there is nothing to continue")
