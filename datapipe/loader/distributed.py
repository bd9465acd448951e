"""Rank and world size: explicit, or from an initialised torch.distributed."""

from __future__ import annotations

from datapipe.errors import ArgumentError
from datapipe.loader.arguments import check_counter


def resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if rank is None and world_size is None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1
    if rank is None or world_size is None:
        raise ArgumentError("give both rank and world_size, or neither")
    rank, world_size = check_counter("rank", rank), check_counter("world_size", world_size, 1)
    if not rank < world_size:
        raise ArgumentError(f"rank {rank} / world_size {world_size}: need 0 <= rank < world_size")
    return rank, world_size


def check_group_unchanged(owner: str, rank: int, world_size: int) -> None:
    """A loader that took rank and world size from torch.distributed must still match it: one
    made before the process group existed would have every rank read the whole dataset."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        now = dist.get_rank(), dist.get_world_size()
        if now != (rank, world_size):
            raise ArgumentError(
                f"{owner} was made as rank {rank} of {world_size}, but torch.distributed now "
                f"says rank {now[0]} of {now[1]}: make the loader after init_process_group "
                "(or Accelerator()), or pass rank and world_size")
