"""A reusable conformance check for resumable loaders: restore at every step."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import torch


def indices_of(batches: list[dict[str, Any]]) -> list[int]:
    return [int(i) for b in batches for i in b["index"][~b["is_padding"]].tolist()]


def same_batch(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal keys, and equal values (tensors elementwise; a tuple of them, one per view)."""
    return a.keys() == b.keys() and all(_same(value, b[key]) for key, value in a.items())


def _same(value: Any, other: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return isinstance(other, torch.Tensor) and value.shape == other.shape and \
            torch.equal(value, other)
    if isinstance(value, tuple):
        return isinstance(other, tuple) and len(value) == len(other) and \
            all(_same(v, o) for v, o in zip(value, other, strict=True))
    return value == other


def check_fields_view_batch_buffers(loader: Any, fields: tuple[str, ...]) -> None:
    """Every batch's `fields` are views of a worker-filled batch buffer that `lock_pages`
    recognises, so `device="cuda"` copies them in place (checked here without CUDA: a lock
    that records what it was asked to lock)."""
    from datapipe.loader.slots import SHARED_MEMFD, lock_pages

    if not SHARED_MEMFD:
        return
    locked: list[tuple[int, int]] = []

    def lock(address: int, nbytes: int) -> Callable[[], None]:
        locked.append((address, nbytes))
        return lambda: None

    batches = 0
    for batch in loader:
        batches += 1
        for name in fields:
            assert lock_pages(batch[name], lock), f"{name} does not view a batch buffer"
    assert batches and locked, "no batch buffer was locked"


def check_cuda_batches_are_the_cpu_batches(make_loader: Callable[..., Any]) -> None:
    """`make_loader(device="cuda")` hands out, field by field, the batches `make_loader()`
    does, with every tensor on the GPU, while each copy queues behind a busy side stream: a
    batch buffer given back to the workers before its copy ran would show as a changed batch.
    The large fields are read in place from the shared buffers (a copy lease is held)."""
    with make_loader() as loader:
        expected = [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in b.items()}
                    for b in loader]
    leased = 0
    with make_loader(device="cuda", prefetch=1) as loader:
        for batch, want in zip(loader, expected, strict=True):
            with torch.cuda.stream(loader._feed.stream):
                torch.cuda._sleep(20_000_000)  # the next copy queues behind this
            leased = max(leased, len(loader._feed.leases))
            assert all(v.is_cuda for v in batch.values() if isinstance(v, torch.Tensor))
            on_host = {k: v.cpu() if isinstance(v, torch.Tensor) else v
                       for k, v in batch.items()}
            assert same_batch(on_host, want), "a batch changed on its way to the GPU"
        assert loader._feed.locker.refusal is None
    assert leased > 0, "no batch buffer was read in place"


def check_resume_at_every_step(make_loader: Callable[[], Any], epoch: int = 0) -> None:
    """For every k: run k batches, save, build a fresh loader, restore, finish the epoch.

    The batches after the restore must be exactly the batches an uninterrupted run gives after
    its first k (same indices, same pixels or tokens): the epoch is still the dataset once.
    """
    with make_loader() as reference:
        reference.set_epoch(epoch)
        full = list(reference)
    for k in range(len(full) + 1):
        with make_loader() as first:
            first.set_epoch(epoch)
            it = iter(first)
            head = [next(it) for _ in range(k)]
            state = first.state_dict()
        with make_loader() as second:
            second.load_state_dict(state)
            second.set_epoch(epoch)
            tail = list(second)
        assert len(head) + len(tail) == len(full), f"restore after {k} batches"
        for got, want in zip(head + tail, full, strict=True):
            assert same_batch(got, want), f"batches differ after a restore at batch {k}"


def run_world(make: Callable[..., Any], world: int, state: dict[str, Any] | None,
              steps: int | None = None, epoch: int = 0) -> tuple[list[list[Any]], dict[str, Any]]:
    """Every rank of `world` from `state` (else from `epoch`'s start) for `steps` steps (else
    to the pass's end): each rank's batches, and rank 0's state after them, through JSON."""
    loaders = [make(rank=r, world_size=world) for r in range(world)]
    try:
        for loader in loaders:
            loader.load_state_dict(state) if state else loader.set_epoch(epoch)
        lengths = {len(loader) for loader in loaders}
        assert len(lengths) == 1, f"ranks disagree on len(): {lengths}"
        count = lengths.pop() if steps is None else steps
        iterators = [iter(loader) for loader in loaders]
        batches = [[next(it) for _ in range(count)] for it in iterators]
        return batches, json.loads(json.dumps(loaders[0].state_dict()))
    finally:
        for loader in loaders:
            loader.close()
