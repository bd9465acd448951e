"""Getting batches onto the device: pinned host memory and copies that overlap compute."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from datapipe.errors import ArgumentError


def resolve_device(device: str | torch.device) -> torch.device:
    """The loader's `device` argument, checked now rather than at the first batch."""
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ArgumentError(f"device {device!r} is not a torch device name such as 'cpu', "
                            "'cuda' or 'cuda:1'") from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ArgumentError(f"device {str(device)!r}: torch {torch.__version__} sees no "
                                "CUDA device; use device='cpu'")
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise ArgumentError(f"device {str(device)!r}: only {torch.cuda.device_count()} "
                                "CUDA device(s)")
    elif resolved.type != "cpu":
        raise ArgumentError(f"device {str(device)!r}: the loader delivers to 'cpu' or 'cuda'")
    return resolved


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
