"""The host tier's memory off the load's path (helios/production/host_memory.py): pinned tensors are
allocated on a thread, the first use waits for them, and an allocation that failed is raised there."""

from __future__ import annotations

import threading

import pytest
import torch

from helios.production import host_memory
from helios.production.host_memory import HostTierMemory

LAYOUTS = {"k": ((3, 4, 2), torch.bfloat16), "v": ((3, 4, 2), torch.float32)}


def test_unpinned_memory_is_allocated_at_once():
    memory = HostTierMemory(LAYOUTS, pinned=False)
    assert memory.ready
    assert {name: (tuple(t.shape), t.dtype) for name, t in memory.tensors.items()} == LAYOUTS
    assert not any(t.is_pinned() for t in memory.tensors.values())


def test_no_planes_no_thread():
    memory = HostTierMemory({}, pinned=True)
    assert memory.ready and memory.tensors == {}


def test_pinned_memory_is_made_on_a_thread_each_plane_on_pages_of_its_own_touched_then_registered(monkeypatch):
    release, registered, unregistered = threading.Event(), [], []

    def register(pointer, size):  # NOTE: stands in for cudaHostRegister, which needs a CUDA device
        assert release.wait(30)
        registered.append((threading.current_thread().name, pointer, size))

    monkeypatch.setattr(host_memory, "_register", register)
    monkeypatch.setattr(host_memory, "_unregister", lambda pointers: unregistered.extend(pointers))
    memory = HostTierMemory(LAYOUTS, pinned=True)  # returns while the thread is held
    assert not memory.ready
    threading.Timer(0.2, release.set).start()
    tensors = memory.tensors  # waits for the thread
    assert memory.ready and {name: (tuple(t.shape), t.dtype) for name, t in tensors.items()} == LAYOUTS
    page = host_memory.PAGE
    assert registered == [("helios-host-tier", tensors[name].data_ptr(), page) for name in LAYOUTS]
    assert all(t.data_ptr() % page == 0 for t in tensors.values())  # whole pages: no two ranges share one
    assert all(bool((t.view(-1).view(torch.uint8) == 0).all()) for t in tensors.values())  # faulted in
    pointers = [t.data_ptr() for t in tensors.values()]
    del memory, tensors
    import gc

    gc.collect()
    assert unregistered == pointers  # the buffer collected: every plane's registration ended


def test_an_allocation_that_failed_is_raised_at_every_use(monkeypatch):
    def refused(pointer, size):
        raise RuntimeError("cannot lock host memory")

    monkeypatch.setattr(host_memory, "_register", refused)
    memory = HostTierMemory(LAYOUTS, pinned=True)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="cannot lock host memory"):
            _ = memory.tensors


def _page_locked(pointer: int) -> bool:
    """Whether the CUDA driver holds `pointer` as page-locked host memory (its driver API: unlike the
    runtime's, a failed query leaves no error behind for torch's next check)."""
    import ctypes

    kind = ctypes.c_uint(0)
    status = ctypes.CDLL("libcuda.so.1").cuPointerGetAttribute(ctypes.byref(kind), 2, ctypes.c_uint64(pointer))
    return status == 0 and kind.value == 1  # CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_MEMORYTYPE_HOST


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinning host memory needs a CUDA device")
def test_registered_planes_are_page_locked_copy_asynchronously_both_ways_and_are_released():
    import gc

    memory = HostTierMemory(LAYOUTS, pinned=True)
    pointers = [t.data_ptr() for t in memory.tensors.values()]
    assert all(_page_locked(p) for p in pointers)
    for host in memory.tensors.values():
        device = torch.arange(host.numel(), device="cuda").reshape(host.shape).to(host.dtype)
        host.copy_(device, non_blocking=True)
        back = torch.empty_like(device)
        back.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        assert torch.equal(host, device.cpu()) and torch.equal(back, device)
    del memory, host
    gc.collect()
    assert not any(_page_locked(p) for p in pointers)
