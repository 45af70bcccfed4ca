"""How to build a runtime for one core (host side): `RuntimeOptions`, what the composition root
(`helios.cli`) hands either runtime's factory (`helios.reference.load_runtime`,
`helios.production.load_runtime`). Options a runtime does not take are refused by that factory with
one line naming them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from helios.errors import HeliosError
from helios.runtime.limits import AdmissionLimits
from helios.runtime.rounds import Executor


class InvalidRuntimeOptions(HeliosError):
    """A runtime option is out of range, or not one the selected runtime takes."""


# (the loaded executor, its physical cache pages) -> the executor the engine drives (e.g. a trace recorder)
ExecutorWrapper = Callable[[Executor, int], Executor]


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    limits: AdmissionLimits  # admission limits, resolved against the core's defaults
    pages: int | None = None  # physical cache pages (None: the runtime sizes the cache)
    device: str | None = None  # production: "cuda", "cuda:N" or "cpu" (None: cuda when present)
    gpu_memory_fraction: float | None = None  # production: share of the GPU Helios may hold (None: 0.9)
    prefix_reuse: bool = True  # production: reuse published prefix pages across requests
    freeze_heap: bool = False  # production: move what loading left out of the cyclic collector's reach (serving)
    wrap_executor: ExecutorWrapper | None = None  # production: wraps the executor the engine drives

    def __post_init__(self) -> None:
        if self.pages is not None and self.pages < 1:
            raise InvalidRuntimeOptions(f"pages must be >= 1, got {self.pages}")
        if self.gpu_memory_fraction is not None and not 0.0 < self.gpu_memory_fraction <= 1.0:
            raise InvalidRuntimeOptions(f"--gpu-memory-fraction must lie in (0, 1], got {self.gpu_memory_fraction}")


__all__ = ["ExecutorWrapper", "InvalidRuntimeOptions", "RuntimeOptions"]
