"""Getting batches onto the device: pinned host memory and copies that overlap compute."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch


def resolve_device(device: str | torch.device) -> torch.device:
    return torch.device(device)


def pin_if_cuda(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    return tensor.pin_memory() if device.type == "cuda" else tensor


def to_device(batch: dict[str, Any], device: torch.device, non_blocking: bool) -> dict[str, Any]:
    return {k: v.to(device, non_blocking=non_blocking) if isinstance(v, torch.Tensor) else v
            for k, v in batch.items()}


def prefetch_to_device(batches: Iterator[tuple[int, dict[str, Any]]],
                       device: torch.device) -> Iterator[tuple[int, dict[str, Any]]]:
    """Items are (batch number, batch). On CUDA, copy batch b+1 on a side stream while the
    caller computes on batch b.

    Host tensors must be pinned for the copy to be asynchronous. The caller's stream waits for
    its own batch's copy only (an event per batch), not for the next batch's copy queued behind
    it; each yielded tensor is recorded on the caller's stream so its memory is not reused while
    still in use.
    """
    if device.type != "cuda":
        yield from batches
        return
    stream = torch.cuda.Stream(device=device)
    pending = None
    for b, batch in batches:
        with torch.cuda.stream(stream):
            moved = to_device(batch, device, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(stream)
        if pending is not None:
            yield pending[0], _hand_over(*pending[1:])
        pending = (b, moved, copied, device)
    if pending is not None:
        yield pending[0], _hand_over(*pending[1:])


def _hand_over(batch: dict[str, Any], copied: torch.cuda.Event,
               device: torch.device) -> dict[str, Any]:
    current = torch.cuda.current_stream(device)
    current.wait_event(copied)
    for value in batch.values():
        if isinstance(value, torch.Tensor) and value.is_cuda:
            value.record_stream(current)
    return batch
