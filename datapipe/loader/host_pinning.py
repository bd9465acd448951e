"""Page-locked batch buffers, so the host-to-device copy reads each batch where it lies.

A copy from pageable memory is staged by the driver, and `pin_memory()` stages it in the
training thread: 9-12 ms per batch of 256 images measured on an H100 host, the loader's largest
per-batch cost there. Instead each shared batch buffer is registered with CUDA
(`cudaHostRegister`) the first time one of its batches is copied, and stays registered until it
is unmapped (slots.py); the copy then reads it in place. What cannot be registered (buffers of
a loader without workers, copies where memfd is missing, or a driver that refuses) is copied
into pinned memory as before, after one warning that says why.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch

from datapipe.loader.slots import Unlock, lock_pages

CUDA_HOST_REGISTER_PORTABLE = 1  # pinned for every CUDA context, not just the current one


class PageLocker:
    """Registers host memory with CUDA; after a first refusal, warns once and stops trying."""

    def __init__(self, device: torch.device | None = None, runtime: Any = None,
                 take_error: Callable[[], None] | None = None) -> None:
        self._runtime = runtime  # torch.cuda.cudart() unless given (tests give fakes)
        self._take_error = take_error or functools.partial(_take_last_error, device)
        self.refusal: str | None = None

    def lock(self, address: int, nbytes: int) -> Unlock | None:
        """Register [address, address + nbytes); returns how to unregister it, or None."""
        if self.refusal is not None:
            return None
        runtime = self._runtime or torch.cuda.cudart()
        error = runtime.cudaHostRegister(address, nbytes, CUDA_HOST_REGISTER_PORTABLE)
        if error != runtime.cudaError.success:
            self._take_error()
            self.refusal = f"cudaHostRegister: {runtime.cudaGetErrorString(error)}"
            warnings.warn(f"datapipe: cannot page-lock batch buffers ({self.refusal}); each "
                          "batch is copied into pinned memory instead, in the training thread",
                          RuntimeWarning, stacklevel=4)
            return None
        return functools.partial(_unregister, runtime, address, self._take_error)


def _unregister(runtime: Any, address: int, take_error: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):  # CUDA already torn down at interpreter exit
        if runtime.cudaHostUnregister(address) != runtime.cudaError.success:
            take_error()


def _take_last_error(device: torch.device | None) -> None:
    """A failed CUDA runtime call stays this thread's "last error" until someone reads it, and
    torch reads it after its next kernel launch, which would then fail in its place. torch does
    not expose cudaGetLastError: a launch of our own takes the error instead."""
    with contextlib.suppress(RuntimeError):
        torch.ones(1, device=device or "cuda")  # a fill kernel: launched, then checked


def page_locked(tensor: torch.Tensor, locker: PageLocker) -> tuple[torch.Tensor, bool]:
    """`tensor` ready for an asynchronous copy, and whether it is the tensor itself.

    Itself when it views a batch buffer that is (now) page-locked: the copy reads it in place,
    so the caller must keep it, and with it the buffer, until the copy has completed. Otherwise
    a copy in pinned memory, which torch keeps alive for the copy by itself."""
    if lock_pages(tensor, locker.lock):
        return tensor, True
    return tensor.pin_memory(), False
