"""Loading a core onto the production runtime (host side; torch is imported only inside
`load_native_model`, where the device half starts): the entry points the commands use.

    model = load_native_model(core)                       # NativeModel: GPU when present, else CPU
    runtime = load_production_runtime(core, limits)       # helios serve --runtime production
    engine = ProductionTokenEngine.load(core)             # helios generate --runtime production

`helios.production.runtime` re-exports every name here (its importers predate this module).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from helios.errors import HeliosError
from helios.runtime.events import Failed, Rejected, TokenEvent
from helios.runtime.interface import PreparedRequest
from helios.runtime.limits import AdmissionLimits
from helios.runtime.request import GenerationRequest

if TYPE_CHECKING:
    from helios.production.runtime import ProductionRuntime


class ProductionUnavailable(HeliosError):
    """The production runtime cannot load this core here; the message says why."""


class GenerationRejected(HeliosError):
    """The scheduler rejected a one-shot generation (outside the prepared capacities)."""


class GenerationFailed(HeliosError):
    """A one-shot generation failed in execution."""


def load_native_model(core: Any, *, max_concurrency: int | None = None, device: str | None = None,
                      pages: int | None = None, gpu_memory_fraction: float | None = None) -> Any:
    """Load `core` with the production executor (`NativeModel`): on the GPU when one is present, else
    on the CPU with the Triton kernels interpreted (slow; for tests and tiny cores)."""
    import os

    import torch  # NOTE: the device half starts here; importing this module imports no torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels module defines its kernels
    from helios.contract import StartupOptions
    from helios.production.native_model import LoadOptions, NativeModel

    startup = StartupOptions(max_concurrency=max_concurrency)
    fraction = {} if gpu_memory_fraction is None else {"gpu_memory_fraction": gpu_memory_fraction}
    return NativeModel.load(core, LoadOptions(device=device, pages=pages, startup=startup, **fraction))


def load_production_runtime(core: Any, limits: AdmissionLimits, **load: Any) -> ProductionRuntime:
    """`helios serve --runtime production`: the core on the production executor, batched. What the
    load left in memory is long-lived: it is moved out of the cyclic garbage collector's reach
    (`gc.freeze`), whose full collections would otherwise walk it every few rounds (measured by
    bench/host_round.py: 2 to 3 ms a round at 256 lanes on the 2-core development machine)."""
    import atexit
    import gc

    from helios.production.runtime import ProductionRuntime

    model = load_native_model(core, max_concurrency=limits.max_active, **load)
    gc.collect()
    gc.freeze()
    atexit.register(gc.unfreeze)  # at exit everything is collectable again (extension modules check)
    return ProductionRuntime.for_native_model(model, limits)


class ProductionTokenEngine:
    """`generate(request) -> Iterator[int]` (sampled ids, EOS included) over the batching runtime:
    what `helios generate --runtime production` runs."""

    def __init__(self, make_runtime: Any) -> None:
        self._make_runtime = make_runtime  # () -> a fresh, unstarted ProductionRuntime

    @classmethod
    def load(cls, core: Any, **load: Any) -> ProductionTokenEngine:
        from helios.production.runtime import ProductionRuntime

        model = load_native_model(core, max_concurrency=1, **load)
        return cls(lambda: ProductionRuntime.for_native_model(model, AdmissionLimits(max_active=1, queue_capacity=1)))

    def generate(self, request: GenerationRequest, *, slot: int = 0) -> Iterator[int]:
        runtime = self._make_runtime()

        async def run() -> list[int]:
            runtime.start()
            try:
                stream = runtime.submit(PreparedRequest("generate", request, observe_tokens=True))
                tokens = []
                async for event in stream:
                    if isinstance(event, TokenEvent):
                        tokens.append(event.token_id)
                    elif isinstance(event, Rejected):
                        raise GenerationRejected(f"the request was rejected: {event.reason}")
                    elif isinstance(event, Failed):
                        raise GenerationFailed(event.message)
                return tokens
            finally:
                runtime.shutdown()

        return iter(asyncio.run(run()))
