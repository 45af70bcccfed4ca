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
from helios.engine.program_choice import ChoiceMemory
from helios.engine.worker import BatchingRuntime
from helios.runtime.options import InvalidRuntimeOptions, RuntimeOptions, adaptive, speculative_width
from helios.runtime.startup import startup_seconds

if TYPE_CHECKING:
    from helios.production.native_model import NativeModel


def load_device(device: str | None) -> str:
    """The device to load on (cuda when present); on the CPU the kernels must be interpreted."""
    import os

    import torch  # NOTE: the device half starts here; importing this module imports no torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels module defines its kernels
        import sys

        kernels = sys.modules.get("helios.production.kernels")
        if kernels is not None and not kernels.INTERPRETED:
            raise RuntimeError("the production kernels were defined without TRITON_INTERPRET=1 in this process, "
                               "so they cannot run on the CPU: set TRITON_INTERPRET=1 before Helios starts")
    return device


def load_native_model(core: CoreSource, *, max_concurrency: int | None = None, device: str | None = None,
                      pages: int | None = None, gpu_memory_fraction: float | None = None,
                      speculative_width: int | None = None, history_drafting: bool = False,
                      measure_costs: bool = False, host_cache_gib: float | None = None) -> NativeModel:
    """Load `core` with the production executor (`NativeModel`): on the GPU when one is present, else
    on the CPU with the Triton kernels interpreted (slow; for tests and tiny cores). The core's
    SPECULATIVE graphs up to `speculative_width` are loaded (None: none wider than one token);
    `measure_costs` times the DECODE and SPECULATIVE graphs' rounds once loaded (adaptive choice);
    `host_cache_gib` bounds the host tier of evicted checkpoints (None: sized from free memory; 0: none)."""
    device = load_device(device)
    from helios.contract import StartupOptions
    from helios.production.native_model import LoadOptions, NativeModel

    # Load-time selection exposes the SPECULATIVE graphs up to the width (width 1: none of a wider one).
    startup = StartupOptions(max_concurrency=max_concurrency, speculative_width=speculative_width or 1,
                             history_drafting=history_drafting)
    fraction = {} if gpu_memory_fraction is None else {"gpu_memory_fraction": gpu_memory_fraction}
    return NativeModel.load(core, LoadOptions(device=device, pages=pages, startup=startup, measure_costs=measure_costs,
                                              host_cache_gib=host_cache_gib, **fraction))


def load_runtime(core: CoreSource, options: RuntimeOptions) -> BatchingRuntime:
    """The production runtime for `core`: the batching engine over the production executor.

    With `options.freeze_heap` (serving), what the load left in memory is moved out of the cyclic
    garbage collector's reach (`gc.freeze`): it is long-lived, and full collections would otherwise
    walk it every few rounds (measured by bench/host_round.py: 2 to 3 ms a round at 256 lanes on the
    2-core development machine)."""
    limits = options.limits
    width = speculative_width(tuple(core.contract.speculative_widths), options)
    if core.manifest.ranks > 1:  # tensor-parallel ranks: rank 0 here, its peers spawned or joining
        model = _load_ranks(core, options, width)
    else:
        model = load_native_model(core, max_concurrency=limits.max_active, device=options.device,
                                  pages=options.pages, gpu_memory_fraction=options.gpu_memory_fraction,
                                  speculative_width=width, history_drafting=options.history_drafting,
                                  measure_costs=adaptive(tuple(core.contract.speculative_widths), options),
                                  host_cache_gib=options.host_cache_gib)
    if options.freeze_heap:
        import atexit
        import gc

        gc.collect()
        gc.freeze()
        atexit.register(gc.unfreeze)  # at exit everything is collectable again (extension modules check)
    return runtime_for(model, options)


def _load_ranks(core: CoreSource, options: RuntimeOptions, width: int | None) -> NativeModel:
    """Rank 0 of a core of several ranks, with its peers (helios/production/ranks/rank_zero.py)."""
    device = load_device(options.device)
    from helios.production.ranks.rank_zero import load_rank_zero

    return load_rank_zero(core, options.ranks, device=device, max_concurrency=options.limits.max_active,
                          pages=options.pages, speculative_width=width, history_drafting=options.history_drafting,
                          measure_costs=adaptive(tuple(core.contract.speculative_widths), options),
                          gpu_memory_fraction=options.gpu_memory_fraction, host_cache_gib=options.host_cache_gib)


def runtime_for(model: NativeModel, options: RuntimeOptions, *,
                memory: ChoiceMemory | None = None) -> BatchingRuntime:
    """The batching engine over an already loaded `NativeModel` (decode lanes run SPECULATIVE rounds
    of the selected width when the model loaded them; under adaptive choice, the program its measured
    costs and observed acceptance favour, the widest width while it measured none). `memory`: as
    `BatchingRuntime.for_executor`'s (runtimes serving the model in turn may share one)."""
    executor = model.executor
    if options.wrap_executor is not None:
        executor = options.wrap_executor(executor, model.pages)
    return BatchingRuntime.for_executor(executor, model.contract, options.limits, pages=model.pages,
                                        graph_names=model.graphs, prefix_reuse=options.prefix_reuse,
                                        speculative_width=_loaded_width(model, options),
                                        history_drafting=options.history_drafting,
                                        adaptive_speculation=adaptive(tuple(model.contract.speculative_widths), options),
                                        startup_seconds=startup_seconds(model.startup),
                                        device_counters=model.device_counters, memory=memory)


def _loaded_width(model: NativeModel, options: RuntimeOptions) -> int | None:
    width = speculative_width(tuple(model.contract.speculative_widths), options)
    if width is None:
        return None
    loaded = {g.speculative.verify_tokens for g in model.contract.graphs
              if g.name in model.graphs and g.speculative is not None}
    if width not in loaded:
        raise InvalidRuntimeOptions(f"--speculative-width {width}: the model was loaded without its speculative "
                                    f"graphs of that width (loaded widths: {sorted(loaded) or 'none'})")
    return width


__all__ = ["load_device", "load_native_model", "load_runtime", "runtime_for"]
