"""Programmatic dependent launch: a kernel of a captured chain may start while the kernel before it
drains, so its launch and setup overlap the predecessor's tail (Hopper and later).

Every kernel launched with it calls `wait_for_prior` before its first access to memory a kernel
of the chain may write (only constant weights may be read before it): the wait returns once the
previous kernel of the stream has completed and its writes are visible, so a kernel never reads
what its predecessor is still writing, nor writes what it is still reading. A
kernel that waits first keeps the stream's order transitively (its own completion implies its
predecessor's), so chains mixing such kernels with ordinary ones (torch operations, cuBLAS) stay
ordered.

`HELIOS_PDL` chooses the mode (read once a device): `0` off; `1` wait first, the dependents
launched when the kernel completes; `2` (the default) wait first, then let the next kernel launch at
once (its programs become resident as this one's retire and wait in turn). Devices before compute
capability 9.0 and CPU tensors (the interpreter) always run with it off. Measured on an H100
(bench/decode.py, its 28-layer hidden-1024 shape, 512-token histories, 243 launches a step):
batch 1 1.263 ms a step off, 1.083 with mode 2; batch 8 1.542 and 1.471; at batch 64 and 256 the
step is product-bound and the modes agree within 1% (BENCHMARKS.md). The GPU suite
(tests/production, tests/conformance) passes under mode 2 as under mode 0. Reading weights before
the wait (no kernel of a chain writes them) was measured against mode 2 in one call on an H100 and
gained nothing: the batch-1 step took 1.102 ms with each one-row product's first weight step loaded
before its wait against 1.100-1.102 ms, and 1.152 ms with every product's whole weight tile
prefetched into L2 before it (BENCHMARKS.md); neither is kept.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from helios.errors import HeliosError

PDL_ENV = "HELIOS_PDL"
MODES = (0, 1, 2)
DEFAULT_MODE = 2


class InvalidLaunchMode(HeliosError):
    """HELIOS_PDL names no mode (raised at the first launch on a Hopper device: load fails in one line)."""


def configured_mode() -> int:
    """The mode `HELIOS_PDL` asks for (DEFAULT_MODE when unset)."""
    setting = os.environ.get(PDL_ENV, "").strip()
    if not setting:
        return DEFAULT_MODE
    if setting not in {str(m) for m in MODES}:
        raise InvalidLaunchMode(f"{PDL_ENV}={setting!r}: expected one of {', '.join(map(str, MODES))}")
    return int(setting)


@functools.cache
def _device_mode(index: int) -> int:
    major, _ = torch.cuda.get_device_capability(index)
    return configured_mode() if major >= 9 else 0


def launch_mode(t: torch.Tensor) -> int:
    """The mode for kernels launched on `t`'s device: 0 on a CPU or a device before Hopper."""
    if not t.is_cuda:
        return 0
    return _device_mode(t.device.index if t.device.index is not None else torch.cuda.current_device())


def dependent(t: torch.Tensor) -> dict[str, object]:
    """Launch arguments of a kernel taking a `PDL: tl.constexpr` and calling `wait_for_prior(PDL)`
    first: the kernel's wait mode (0, 1 or 2) and Triton's `launch_pdl` option."""
    mode = launch_mode(t)
    return {"PDL": mode, "launch_pdl": mode > 0}


@triton.jit
def wait_for_prior(PDL: tl.constexpr):
    """The first statement of a kernel launched with `dependent(...)`'s arguments."""
    if PDL >= 1:
        tl.extra.cuda.gdc_wait()
    if PDL == 2:
        tl.extra.cuda.gdc_launch_dependents()
