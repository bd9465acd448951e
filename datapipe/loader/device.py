"""Getting batches onto the device: copies from page-locked buffers that overlap compute.

Per batch, the process that iterates the loader only queues work. On CUDA the next batch's
copies are queued on a side stream while the caller computes on the current one; the image
copy reads the shared batch buffer in place (page-locked once, host_pinning.py), so the buffer
is held back from the workers until the copy's event has completed (`CopyLeases`). The caller's
stream waits for its own batch's copy only. What the consumer spends per batch is reported as
named stages: "pin" (making the host batch page-locked: nothing once its buffer is registered,
a copy into pinned memory where it cannot be) and "copy" (queueing the copies).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import torch

from datapipe.errors import ArgumentError
from datapipe.loader.host_pinning import PageLocker, page_locked

Batches = Iterator[tuple[int, dict[str, Any]]]  # (batch number, batch)


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


class CopyLeases:
    """What queued copies read, kept alive until each copy's event has completed.

    A batch buffer goes back to the workers as soon as nothing refers to its batch (slots.py),
    and a DALI output back to DALI's pool: with an asynchronous copy the GPU may still be
    reading either after the caller dropped it. Events come from one stream and complete in
    order, so only the oldest is asked (`query`, which never blocks).
    """

    def __init__(self) -> None:
        self._held: deque[tuple[Any, tuple[Any, ...]]] = deque()

    def hold(self, event: Any, *objects: Any) -> None:
        self._held.append((event, objects))

    def release_finished(self) -> None:
        while self._held and self._held[0][0].query():
            self._held.popleft()

    def wait_all(self) -> None:
        """Block until every held copy has completed (when buffers are about to go)."""
        while self._held:
            event, _ = self._held.popleft()
            event.synchronize()

    def __len__(self) -> int:
        return len(self._held)


def to_device(batch: dict[str, Any], device: torch.device, non_blocking: bool) -> dict[str, Any]:
    """Tensors, and tuples of them (one per view), moved to `device`."""
    def moved(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.to(device, non_blocking=non_blocking)
        if isinstance(value, tuple):
            return tuple(moved(v) for v in value)
        return value

    return {k: moved(v) for k, v in batch.items()}


class DeviceFeed:
    """Batches to `device`: a pass-through on the CPU; on CUDA, batch b+1 is copied on a side
    stream while the caller computes on batch b. `pin` names the large host tensors to copy
    from page-locked memory (the others are small: copied as they are)."""

    def __init__(self, device: torch.device, pin: tuple[str, ...] = (),
                 locker: PageLocker | None = None, record_stages: bool = False) -> None:
        self.device, self.pin = device, pin
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device=device) if self.cuda else None
        self.locker = locker or PageLocker(device)
        self.leases = CopyLeases()
        self._stages: dict[int, dict[str, float]] | None = {} if record_stages else None

    def batches(self, host: Batches) -> Batches:
        if not self.cuda:
            yield from host
            return
        if self._stages is not None:
            self._stages.clear()  # an abandoned iteration's batches are never reported
        pending = None
        for b, batch in self._let_go_first(host):
            moved, copied = self._send(b, batch)
            if pending is not None:
                yield pending[0], hand_over(pending[1], pending[2], self.device)
            pending = (b, moved, copied)
        if pending is not None:
            yield pending[0], hand_over(pending[1], pending[2], self.device)

    def _let_go_first(self, host: Batches) -> Batches:
        """`host`, with buffers whose copies have completed let go of before each batch is
        fetched: fetching hands free buffers to the workers."""
        while True:
            self.leases.release_finished()
            item = next(host, None)
            if item is None:
                return
            yield item

    def _send(self, b: int, batch: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        started = time.perf_counter()
        host, in_place = self._page_locked(batch)
        pinned = time.perf_counter()
        with torch.cuda.stream(self.stream):
            moved = to_device(host, self.device, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self.stream)
        if in_place:
            self.leases.hold(copied, *in_place)
        if self._stages is not None:
            self._stages[b] = {"pin": pinned - started, "copy": time.perf_counter() - pinned}
        return moved, copied

    def _page_locked(self, batch: dict[str, Any]) -> tuple[dict[str, Any], list[torch.Tensor]]:
        """The batch with its `pin` tensors page-locked, and those read in place."""
        host: dict[str, Any] = dict(batch)
        in_place: list[torch.Tensor] = []
        for key in self.pin:
            if key in host:
                host[key] = _locked(host[key], self.locker, in_place)
        return host, in_place

    def take_stages(self, b: int) -> dict[str, float]:
        """Batch b's "pin" and "copy" seconds (none on the CPU)."""
        return self._stages.pop(b, {}) if self._stages is not None else {}

    def close(self) -> None:
        self.leases.wait_all()


def _locked(value: Any, locker: PageLocker, in_place: list[torch.Tensor]) -> Any:
    """`value` (a tensor, or a tuple of them: one per view, all in the same buffer) ready for
    an asynchronous copy; the tensors read in place are added to `in_place`. A function of its
    own, not a closure: a nested function that calls itself is a reference cycle, which kept
    `in_place` and with it every batch buffer alive until the garbage collector ran, so the
    workers were given a new buffer (page-locked anew, ~4 ms) for nearly every batch."""
    if isinstance(value, tuple):
        return tuple(_locked(v, locker, in_place) for v in value)
    if not isinstance(value, torch.Tensor) or value.is_cuda:
        return value
    tensor, same = page_locked(value, locker)
    if same:
        in_place.append(value)
    return tensor


def prefetch_to_device(batches: Batches, device: torch.device) -> Batches:
    """Items are (batch number, batch). On CUDA, copy batch b+1 on a side stream while the
    caller computes on batch b (see `DeviceFeed`)."""
    yield from DeviceFeed(device).batches(batches)


def hand_over(batch: dict[str, Any], copied: Any, device: torch.device) -> dict[str, Any]:
    """The caller's stream waits for this batch's copy only, not for later copies queued
    behind it; each tensor is recorded on that stream so its memory is not reused while still
    in use there."""
    current = torch.cuda.current_stream(device)
    current.wait_event(copied)
    for value in batch.values():
        for tensor in value if isinstance(value, tuple) else (value,):
            if isinstance(tensor, torch.Tensor) and tensor.is_cuda:
                tensor.record_stream(current)
    return batch
