"""The production runtime's factory (host side; torch is imported only inside `load_native_model`,
where the device half starts): a core becomes a `ModelRuntime`.

    model = load_native_model(core)                              # NativeModel: GPU when present, else CPU
    runtime = load_runtime(core, RuntimeOptions(limits))         # helios serve / generate --runtime production

The runtime is the host engine's `BatchingRuntime` over the loaded `NativeExecutor` (or over what
`options.wrap_executor` makes of it, e.g. a trace recorder).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from helios.core.source import CoreSource
from helios.engine.worker import BatchingRuntime
from helios.runtime.options import InvalidRuntimeOptions, RuntimeOptions, speculative_width

if TYPE_CHECKING:
    from helios.production.native_model import NativeModel


class SpeculationNotScheduled(InvalidRuntimeOptions):
    """A speculative core asked to speculate in a runtime that cannot yet."""


def load_native_model(core: CoreSource, *, max_concurrency: int | None = None, device: str | None = None,
                      pages: int | None = None, gpu_memory_fraction: float | None = None,
                      speculation: bool = True) -> NativeModel:
    """Load `core` with the production executor (`NativeModel`): on the GPU when one is present, else
    on the CPU with the Triton kernels interpreted (slow; for tests and tiny cores). Without
    `speculation` the core's SPECULATIVE graphs wider than one token are not loaded."""
    import os

    import torch  # NOTE: the device half starts here; importing this module imports no torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels module defines its kernels
    from helios.contract import StartupOptions
    from helios.production.native_model import LoadOptions, NativeModel

    # Without speculation only the graphs of width 1 are exposed (selection drops wider SPECULATIVE ones).
    startup = StartupOptions(max_concurrency=max_concurrency, speculative_width=None if speculation else 1)
    fraction = {} if gpu_memory_fraction is None else {"gpu_memory_fraction": gpu_memory_fraction}
    return NativeModel.load(core, LoadOptions(device=device, pages=pages, startup=startup, **fraction))


def load_runtime(core: CoreSource, options: RuntimeOptions) -> BatchingRuntime:
    """The production runtime for `core`: the batching engine over the production executor.

    With `options.freeze_heap` (serving), what the load left in memory is moved out of the cyclic
    garbage collector's reach (`gc.freeze`): it is long-lived, and full collections would otherwise
    walk it every few rounds (measured by bench/host_round.py: 2 to 3 ms a round at 256 lanes on the
    2-core development machine)."""
    limits = options.limits
    if speculative_width(tuple(core.contract.speculative_widths), options) is not None:
        raise SpeculationNotScheduled(
            "this core captured speculative programs, which the production runtime does not schedule yet: "
            "serve it with --no-speculation (plain decoding; the draft is kept in step) or --runtime reference")
    model = load_native_model(core, max_concurrency=limits.max_active, device=options.device, pages=options.pages,
                              gpu_memory_fraction=options.gpu_memory_fraction, speculation=False)
    if options.freeze_heap:
        import atexit
        import gc

        gc.collect()
        gc.freeze()
        atexit.register(gc.unfreeze)  # at exit everything is collectable again (extension modules check)
    return runtime_for(model, options)


def runtime_for(model: NativeModel, options: RuntimeOptions) -> BatchingRuntime:
    """The batching engine over an already loaded `NativeModel`."""
    executor = model.executor
    if options.wrap_executor is not None:
        executor = options.wrap_executor(executor, model.pages)
    return BatchingRuntime.for_executor(executor, model.contract, options.limits, pages=model.pages,
                                        graph_names=model.graphs, prefix_reuse=options.prefix_reuse)


__all__ = ["load_native_model", "load_runtime", "runtime_for"]
