"""Composition (host side): a core, its runtime and the HTTP app, run by uvicorn.

Owns: `ServeOptions`, `load_state` (open and authorize the core, Bootstrap, the engine and its
runtime with resolved admission limits) and `serve`. Startup fails, with one HeliosError, on
anything inconsistent; serving then runs until interrupted, and shutdown gives open connections
five seconds to drain before dropping them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helios.errors import HeliosError
from helios.frontend.bootstrap import Bootstrap
from helios.frontend.preparation import Preparer
from helios.runtime.limits import resolve_limits
from helios.runtime.worker import WorkerRuntime
from helios.server.app import create_app
from helios.server.state import ServerState

SHUTDOWN_DRAIN_S = 5
RUNTIMES = ("reference", "production")


class RuntimeUnavailable(HeliosError):
    """The selected runtime cannot serve on this machine or in this build."""


@dataclass(frozen=True, slots=True)
class ServeOptions:
    core: Path
    accept: str
    trust: tuple[str, ...]
    host: str = "127.0.0.1"
    port: int = 8000
    runtime: str = "reference"
    max_active: int | None = None
    queue_capacity: int | None = None
    frontend_workers: int | None = None
    trace: Path | None = None  # production: record every submission to this file (conformance trace)
    gpu_memory_fraction: float | None = None  # production: share of the GPU Helios may hold (None: 0.9)

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise RuntimeUnavailable(f"--runtime must be one of {', '.join(RUNTIMES)}, got {self.runtime!r}")
        if self.trace is not None and self.runtime != "production":
            raise RuntimeUnavailable("--trace records the production runtime's submissions; add --runtime production")
        if self.gpu_memory_fraction is not None:
            if self.runtime != "production":
                raise RuntimeUnavailable("--gpu-memory-fraction sizes the production runtime's cache; "
                                         "add --runtime production")
            if not 0.0 < self.gpu_memory_fraction <= 1.0:
                raise RuntimeUnavailable(f"--gpu-memory-fraction must lie in (0, 1], got {self.gpu_memory_fraction}")
        if not 0 <= self.port < 65536:
            raise RuntimeUnavailable(f"--port must lie in [0, 65535], got {self.port}")


def load_state(options: ServeOptions) -> tuple[ServerState, Any]:
    """Open the core and build everything the app serves. Returns the state and the open core."""
    from helios.core import open_core

    core = open_core(options.core, trusted_keys=list(options.trust), accept=options.accept)
    contract = core.contract
    bootstrap = Bootstrap.from_core(core)
    limits = resolve_limits(
        contract.defaults,
        max_active=options.max_active,
        queue_capacity=options.queue_capacity,
        frontend_workers=options.frontend_workers,
        max_concurrency=contract.max_concurrency or None,
    )
    preparer = Preparer(
        bootstrap,
        served_id=contract.served_id,
        aliases=tuple(contract.aliases),
        context_tokens=contract.context_tokens,
        sampled_tokens=contract.model.vocabulary.sampled_tokens,
        mask_words=contract.model.vocabulary.mask_words,
    )
    if options.runtime == "production":
        load = {} if options.gpu_memory_fraction is None else {"gpu_memory_fraction": options.gpu_memory_fraction}
        if options.trace is not None:
            from conformance.runner import traced_production_runtime

            runtime = traced_production_runtime(core, limits, options.trace, **load)
            return ServerState(runtime=runtime, preparer=preparer), core
        from helios.production.runtime import load_production_runtime

        return ServerState(runtime=load_production_runtime(core, limits, **load), preparer=preparer), core
    from helios.reference.cache import pages_for
    from helios.reference.engine import AdmissionRejected, ReferenceEngine

    # every slot can reach the full context: page shortages then only come from the core's limits
    pages = limits.max_active * pages_for(contract.context_tokens, contract.model.cache.page_tokens)
    engine = ReferenceEngine.load(core, pages=pages)
    runtime = WorkerRuntime(
        engine,
        limits,
        context_tokens=contract.context_tokens,
        vocab_size=contract.model.vocabulary.sampled_tokens,
        input_vocab_size=contract.model.input_vocabulary.input_tokens or None,
        capacity={"pages": pages, "max_concurrency": contract.max_concurrency},
        available=lambda: {"pages": engine.allocator.free},
        rejections=(AdmissionRejected,),
        eos_token_ids=tuple(contract.model.frontend.eos_token_ids),
    )
    return ServerState(runtime=runtime, preparer=preparer), core


def serve(options: ServeOptions) -> None:
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    state, core = load_state(options)
    limits = state.runtime.limits
    logging.getLogger("helios.server").info(
        "serving %s (%s runtime) on http://%s:%d: max_active=%d queue_capacity=%d frontend_workers=%d",
        state.preparer.served_id,
        options.runtime,
        options.host,
        options.port,
        limits.max_active,
        limits.queue_capacity,
        limits.frontend_workers,
    )
    app = create_app(state, on_shutdown=core.close)
    config = uvicorn.Config(
        app,
        host=options.host,
        port=options.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=SHUTDOWN_DRAIN_S,
        lifespan="on",
    )
    try:
        uvicorn.Server(config).run()
    except KeyboardInterrupt:
        # NOTE: uvicorn drains, shuts the app down, then re-raises the captured Ctrl-C: that is
        # the normal way to stop a server, not an error.
        pass
    logging.getLogger("helios.server").info("stopped")
