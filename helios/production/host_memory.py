"""The host tier's memory (device side): one host tensor per cache plane, allocated off the load's path.

    memory = HostTierMemory({plane: (shape, dtype)}, pinned=True)   # returns at once
    memory.tensors[plane]                                            # the first use waits for it

Page-locking gigabytes of host memory costs seconds, and nothing needs the tier before the device
cache first evicts a cached page: an offload is the tier's first write, a readmission reads only
pages an offload wrote. So on a GPU the tier is made on a thread started at load, and `tensors`
joins it: the load returns, the first requests are served, and a round that carries the first
host-tier copy waits for whatever is left (in practice nothing: a cache fills over many rounds).

How the thread pins matters. `torch.empty(..., pin_memory=True)` (cudaHostAlloc) holds the driver
while it faults in and locks the whole allocation: measured on an H100 host, a 4 GiB tier allocated
that way on a thread still held the load's next CUDA call for its 3.3 s. The thread therefore
allocates the planes as ordinary memory (views of one buffer, each plane on pages of its own),
touches every page itself (CPU work, no CUDA call, the GIL released), and only then registers each
plane with the driver (`cudaHostRegister`, one call a plane of faulted-in pages): the driver is held
a plane at a time. Registered memory is page-locked memory to the driver: copies between it and
the device are asynchronous DMA, as from cudaHostAlloc's (measured on an H100: the host tier's
readmissions at 40.0 GB/s either way); torch's `is_pinned()` does not report it, and nothing here
asks. The planes are unregistered when their buffer is collected. Unpinned (a CPU) the tensors are
allocated at once. The tensors are never read before an offload wrote them. An allocation that
failed (host memory exhausted, the driver refusing to register) is raised at the first use, as an
allocation at load would have raised there.
"""

from __future__ import annotations

import math
import mmap
import threading
import weakref
from collections.abc import Mapping

import torch

Layout = tuple[tuple[int, ...], torch.dtype]  # a plane's host tensor: (shape, dtype)


class HostTierMemory:
    """The tier's host tensors (cache plane -> tensor), allocated on a thread where `pinned`."""

    def __init__(self, layouts: Mapping[str, Layout], *, pinned: bool) -> None:
        self._layouts = dict(layouts)
        self._tensors: dict[str, torch.Tensor] = {}
        self._buffer: torch.Tensor | None = None  # pinned: the planes' one buffer (its collection unregisters them)
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if pinned and self._layouts:
            # NOTE: not a daemon: the interpreter's exit waits for a page-locking call in flight
            self._thread = threading.Thread(target=self._allocate, args=(True,), name="helios-host-tier")
            self._thread.start()
        else:
            self._allocate(pinned)

    def _allocate(self, pinned: bool) -> None:
        try:
            if pinned:
                self._buffer, self._tensors = _pinned_planes(self._layouts)
            else:
                self._tensors = {name: torch.empty(shape, dtype=dtype) for name, (shape, dtype) in self._layouts.items()}
        except BaseException as error:  # NOTE: re-raised by the first use, on the thread that uses it
            self._error = error

    @property
    def ready(self) -> bool:
        """Whether the allocation has finished (`tensors` would not wait)."""
        return self._thread is None or not self._thread.is_alive()

    @property
    def tensors(self) -> dict[str, torch.Tensor]:
        """Cache plane -> its host tensor [pages, ...one page...]; waits for the allocation."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            raise self._error
        return self._tensors


def _pinned_planes(layouts: Mapping[str, Layout]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(buffer, planes): the planes as views of one host buffer, each starting on a page of its own (two registered
    ranges never share a page), every page faulted in, then each plane registered with the driver.
    The registrations end when the buffer is collected."""
    sizes = {name: math.prod(shape) * dtype.itemsize for name, (shape, dtype) in layouts.items()}
    spans = {name: -(-size // PAGE) * PAGE for name, size in sizes.items()}
    buffer = torch.empty(sum(spans.values()) + PAGE, dtype=torch.uint8)
    buffer.zero_()  # NOTE: CPU work with the GIL released: the driver then locks pages already there
    start = -buffer.data_ptr() % PAGE
    planes, registered = {}, []
    weakref.finalize(buffer, _unregister, registered)
    for name, (shape, dtype) in layouts.items():
        planes[name] = buffer[start:start + sizes[name]].view(dtype).view(shape)
        _register(buffer.data_ptr() + start, spans[name])
        registered.append(buffer.data_ptr() + start)
        start += spans[name]
    return buffer, planes


def _register(pointer: int, size: int) -> None:
    """Page-locks `size` bytes at `pointer` for CUDA (portable: every device's context sees them pinned)."""
    status = int(torch.cuda.cudart().cudaHostRegister(pointer, size, REGISTER_PORTABLE))
    if status != 0:
        raise RuntimeError(f"the host tier could not pin {size} bytes of host memory (CUDA error {status})")


def _unregister(pointers: list[int]) -> None:
    for pointer in pointers:
        try:
            torch.cuda.cudart().cudaHostUnregister(pointer)
        except Exception:  # NOTE: at interpreter exit the CUDA runtime may be gone; the memory goes with the process
            pass


PAGE = mmap.PAGESIZE
REGISTER_PORTABLE = 1  # cudaHostRegisterPortable


__all__ = ["HostTierMemory", "Layout"]
