"""Batch buffers that workers fill and the consumer hands out without copying.

A batch is handed out as a tensor over its buffer ("leased"). The buffer is reused only once
that tensor, and every view or array derived from it, is gone: the lease is a weak reference
to the one ndarray the tensor's storage keeps alive. A training loop that drops each batch after
its step cycles through a handful of buffers; a caller that keeps batches (``list(loader)``)
gets new buffers instead of overwritten ones.

On Linux a buffer is a memfd, passed to already-running workers over a Unix socket
(SCM_RIGHTS): no name in /dev/shm to go stale, freed when the last mapping goes. Where memfd is
missing, a fixed set of anonymous maps is made before the workers fork and the consumer gets
copies instead.

For device="cuda" the consumer's mapping of a buffer can be page-locked once (`lock_pages`), so
the host-to-device copy reads the batch in place. It is unlocked before it is unmapped: when it
is closed, or, if a batch still views it then, when that batch goes.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import socket
import struct
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

SHARED_MEMFD = hasattr(os, "memfd_create")
# A worker writes every page of a new buffer: one write fault per 4 KB page (35 ms for a 38 MB
# batch on a 2-core VM) unless the pages are mapped in one call when the buffer arrives (24 ms).
# The consumer only reads, where the kernel maps pages 16 at a fault: nothing to gain there.
_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)


Unlock = Callable[[], None]


@dataclass
class Slot:
    id: int
    buffer: mmap.mmap
    fd: int | None  # memfd, or None for a map inherited through fork
    busy: bool = False  # a worker is filling it, or its batch is not yet handed out
    lease: weakref.ref | None = field(default=None, repr=False)
    unlock: Unlock | None = field(default=None, repr=False)  # set while page-locked
    address: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Taken from a view that goes at once: a live view would keep the map from closing.
        self.address = np.frombuffer(self.buffer, dtype=np.uint8).ctypes.data

    @property
    def free(self) -> bool:
        return not self.busy and (self.lease is None or self.lease() is None)

    def close(self) -> None:
        if _LOCKABLE.get(self.address) is self:
            del _LOCKABLE[self.address]
        if self.unlock is not None:
            holder = self.lease() if self.lease is not None else None
            if holder is None:
                self.unlock()
            else:  # a batch (or a copy still reading it) views the map: unlock when it goes
                weakref.finalize(holder, self.unlock).atexit = False
            self.unlock = None
        self.buffer.close()
        if self.fd is not None:
            os.close(self.fd)


# The consumer's memfd buffers in this process, by address: what `lock_pages` may lock.
_LOCKABLE: weakref.WeakValueDictionary[int, Slot] = weakref.WeakValueDictionary()


def lock_pages(tensor: torch.Tensor, lock: Callable[[int, int], Unlock | None]) -> bool:
    """Page-lock the batch buffer `tensor` views, once per buffer: `lock(address, nbytes)`
    returns how to undo it, or None when it cannot. False when `tensor` is not a view of a
    batch buffer of this process or the buffer could not be locked."""
    storage = tensor.untyped_storage()
    slot = _LOCKABLE.get(storage.data_ptr())
    if slot is None or len(slot.buffer) != storage.nbytes():
        return False
    if slot.unlock is None:
        slot.unlock = lock(storage.data_ptr(), storage.nbytes())
    return slot.unlock is not None


def slot_view(slot: torch.Tensor, part: np.ndarray) -> torch.Tensor:
    """`part` (a C-contiguous NumPy view into the leased buffer `slot`) as a tensor over the
    slot's own storage: what `lock_pages` recognises as a batch buffer to copy in place. A
    tensor made with `torch.from_numpy(part)` would own a storage of `part`'s bytes only, and
    be copied through pinned memory instead."""
    offset = part.ctypes.data - slot.data_ptr()
    if not part.flags.c_contiguous or offset < 0 or offset + part.nbytes > slot.numel():
        raise ValueError("slot_view: part is not a contiguous view of the slot")
    dtype = torch.from_numpy(part[:0].reshape(-1)).dtype
    return slot[offset:offset + part.nbytes].view(dtype).view(part.shape)


@dataclass(frozen=True)
class SlotRef:
    """What a worker needs to find a slot: its id and size; `fd` is the consumer's memfd (sent
    over the worker's socket the first time that worker meets the slot), or None."""

    id: int
    fd: int | None
    nbytes: int


_SLOT_ID = struct.Struct("<q")


def send_slot(channel: socket.socket, ref: SlotRef) -> None:
    """Give a worker the slot's memfd (the kernel duplicates it into the worker)."""
    socket.send_fds(channel, [_SLOT_ID.pack(ref.id)], [ref.fd])


class SlotTable:
    """The consumer's side: hands out free slots, making new ones when all are leased."""

    def __init__(self, nbytes: int, spare: int, prefork: int = 0) -> None:
        self.nbytes = max(1, nbytes)
        self.spare = spare  # free slots kept beyond what is in flight
        self._slots: dict[int, Slot] = {}
        self._next_id = 0
        self.zero_copy = SHARED_MEMFD
        if not SHARED_MEMFD:  # fixed maps, inherited by workers forked after this
            for _ in range(prefork):
                self._add(mmap.mmap(-1, self.nbytes), None)

    def prefork_buffers(self) -> dict[int, mmap.mmap]:
        """Maps that exist before the workers fork (the non-memfd case)."""
        return {s.id: s.buffer for s in self._slots.values() if s.fd is None}

    def _add(self, buffer: mmap.mmap, fd: int | None) -> Slot:
        slot = Slot(self._next_id, buffer, fd)
        self._slots[slot.id] = slot
        self._next_id += 1
        if fd is not None:
            _LOCKABLE[slot.address] = slot
        return slot

    def acquire(self) -> SlotRef:
        """A slot for the next task: a free one, else a new one."""
        slot = next((s for s in self._slots.values() if s.free), None)
        if slot is None:
            if not SHARED_MEMFD:
                raise RuntimeError("all batch buffers are in use")  # cannot happen: copies
            fd = os.memfd_create("datapipe-batch", os.MFD_CLOEXEC)
            os.ftruncate(fd, self.nbytes)
            slot = self._add(mmap.mmap(fd, self.nbytes), fd)
        slot.busy, slot.lease = True, None
        return SlotRef(slot.id, slot.fd, self.nbytes)

    def lease(self, slot_id: int) -> torch.Tensor:
        """The slot's bytes as a uint8 tensor; the slot stays taken while the tensor (or any
        view of it) lives. Without memfd, a copy, and the slot is free at once."""
        slot = self._slots[slot_id]
        slot.busy = False
        view = np.frombuffer(slot.buffer, dtype=np.uint8)
        if not self.zero_copy:
            return torch.from_numpy(view.copy())
        slot.lease = weakref.ref(view)
        return torch.from_numpy(view)

    def release(self, slot_id: int) -> None:
        """A slot whose task was abandoned."""
        self._slots[slot_id].busy = False

    def retire_surplus(self) -> list[int]:
        """Close free slots beyond `spare` (after a caller let go of many kept batches);
        returns the ids workers should unmap."""
        free = [s for s in self._slots.values() if s.free and s.fd is not None]
        retired = []
        for slot in free[:max(0, len(free) - self.spare)]:
            del self._slots[slot.id]
            slot.close()
            retired.append(slot.id)
        return retired

    def __len__(self) -> int:
        return len(self._slots)

    def close(self) -> None:
        for slot in self._slots.values():
            try:
                slot.close()
            except BufferError:  # a leased batch still refers to it: its map stays valid
                if slot.fd is not None:
                    os.close(slot.fd)
        self._slots.clear()


class WorkerSlots:
    """A worker's side: maps slots on first use (their memfds arrive on `channel`, in the
    order the tasks naming them do), unmaps retired ones."""

    def __init__(self, inherited: dict[int, mmap.mmap], channel: socket.socket | None) -> None:
        self._maps = dict(inherited)
        self._channel = channel

    def view(self, ref: SlotRef) -> np.ndarray:
        buffer = self._maps.get(ref.id)
        if buffer is None:
            if self._channel is None:
                raise RuntimeError(f"slot {ref.id} is unknown to this worker")
            data, fds, _, _ = socket.recv_fds(self._channel, _SLOT_ID.size, 1)
            try:
                (sent_id,) = _SLOT_ID.unpack(data)
                if sent_id != ref.id or len(fds) != 1:
                    raise RuntimeError(f"expected slot {ref.id}, received {sent_id}")
                buffer = mmap.mmap(fds[0], ref.nbytes, flags=_MAP_FLAGS)
            finally:
                for fd in fds:
                    os.close(fd)
            self._maps[ref.id] = buffer
        return np.frombuffer(buffer, dtype=np.uint8)

    def forget(self, ids: list[int]) -> None:
        for slot_id in ids:
            buffer = self._maps.pop(slot_id, None)
            if buffer is not None:
                with contextlib.suppress(BufferError):  # a view still open: unmapped with it
                    buffer.close()
