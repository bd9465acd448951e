"""Batches for the opt-in probes: the same batch again (oracle) or doubled (scaling test)."""

from __future__ import annotations

from typing import Any

import torch


def batch_size_of(batch: Any) -> int | None:
    if isinstance(batch, dict):
        for value in batch.values():
            if isinstance(value, torch.Tensor) and value.ndim:
                return value.shape[0]
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], torch.Tensor):
        return batch[0].shape[0]
    return None


def double_batch(batch: Any) -> Any | None:
    """The batch twice over (2x the work), or None when its shape does not allow it."""
    if isinstance(batch, dict) and "cu_seqlens" in batch and batch["input_ids"].ndim == 1:
        return _double_packed(batch)
    n = batch_size_of(batch)
    if n is None:
        return None
    if isinstance(batch, dict):
        return {k: _double(v, n) for k, v in batch.items()}
    return type(batch)(_double(v, n) for v in batch)


def _double(value: Any, n: int) -> Any:
    if isinstance(value, torch.Tensor) and value.ndim and value.shape[0] == n:
        return torch.cat([value, value])
    return value


def _double_packed(batch: dict[str, Any]) -> dict[str, Any]:
    """Packed token batches: two copies of every sequence, cu_seqlens continued."""
    out = dict(batch)
    for key in ("input_ids", "labels", "position_ids"):
        if key in batch:
            out[key] = torch.cat([batch[key], batch[key]])
    cu = batch["cu_seqlens"]
    out["cu_seqlens"] = torch.cat([cu, cu[1:] + cu[-1]])
    out["num_real_tokens"] = 2 * batch.get("num_real_tokens", 0)
    return out
