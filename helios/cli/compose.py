"""The composition root (host side): the one place that picks a runtime and builds what serves.

Owns: `load_runtime` (a core becomes the selected runtime through that runtime's own factory,
`helios.reference.load_runtime` or `helios.production.load_runtime`), `ServeOptions` and
`load_state` (open and authorize the core, Bootstrap, the runtime with resolved admission limits,
and, with `--trace`, the conformance trace recorder injected around the production executor).
Startup fails, with one HeliosError, on anything inconsistent. `helios.server` serves whatever
state it is given and imports neither runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helios.core.source import CoreSource
from helios.errors import HeliosError
from helios.frontend.bootstrap import Bootstrap
from helios.frontend.preparation import Preparer
from helios.runtime.interface import ModelRuntime
from helios.runtime.limits import resolve_limits
from helios.runtime.options import (
    ExecutorWrapper,
    InvalidRuntimeOptions,
    RankOptions,
    RankPeers,
    RuntimeOptions,
)
from helios.runtime.scores import core_prompt_score_width
from helios.server.guard import DEFAULT_MAX_REQUEST_BYTES, GuardPolicy
from helios.server.state import ServerState

RUNTIMES = ("reference", "production")


class RuntimeUnavailable(HeliosError):
    """The selected runtime cannot serve on this machine or in this build."""


class ApiKeyUnavailable(HeliosError):
    """The API key option is contradictory, or its key file cannot be read or holds no key."""


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
    host_cache_gib: float | None = None  # production: host tier of evicted checkpoints (None: sized; 0: none)
    speculative_width: int | None = None  # a speculative core: the width decoding uses (None: the widest)
    speculation: bool = True  # False: plain decoding on a speculative core
    adaptive_speculation: bool = False  # choose each round's program from measured costs (--speculative-width auto)
    history_drafting: bool = False  # speculative rounds also carry proposals copied from request histories
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES  # a POST body past this is refused (413)
    api_key: str | None = None  # bearer token required on every endpoint but /health
    api_key_file: Path | None = None  # the same, read from the first line of a file
    allowed_hosts: tuple[str, ...] = ()  # Host header names answered (empty: the bound address's default)
    public_metrics: bool = False  # /metrics without the API key
    rank_peers: str = "threads"  # production, a core of several ranks: spawn the peers, or await them (processes)
    master: str | None = None  # ADDR:PORT rank 0 listens on for its peers
    rank_timeout: float | None = None  # seconds a collective waits for a peer (None: 30)
    allow_remote_images: bool = False  # fetch http(s) image URLs of chat image parts (else a 400: data: URLs only)

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
        if self.host_cache_gib is not None:
            if self.runtime != "production" and self.host_cache_gib:
                raise RuntimeUnavailable("--host-cache-gib sizes the production runtime's host tier (the reference "
                                         "runtime never evicts a cache page); add --runtime production")
            if not self.host_cache_gib >= 0:
                raise RuntimeUnavailable(f"--host-cache-gib must be >= 0, got {self.host_cache_gib}")
        if not 0 <= self.port < 65536:
            raise RuntimeUnavailable(f"--port must lie in [0, 65535], got {self.port}")
        if self.api_key is not None and self.api_key_file is not None:
            raise ApiKeyUnavailable("give --api-key or --api-key-file, not both")

    def policy(self) -> GuardPolicy:
        """The request guard's policy (the API key read from its file here)."""
        key = self.api_key
        if self.api_key_file is not None:
            try:
                lines = self.api_key_file.read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as error:
                cause = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
                raise ApiKeyUnavailable(f"{self.api_key_file}: cannot read the API key file: {cause}") from None
            key = lines[0].strip() if lines else ""
            if not key:
                raise ApiKeyUnavailable(f"{self.api_key_file}: the API key file's first line is empty")
        return GuardPolicy.for_address(self.host, allowed_hosts=self.allowed_hosts, api_key=key,
                                       max_request_bytes=self.max_request_bytes, public_metrics=self.public_metrics)  # fmt: skip


def rank_options(core: Path | str, trust, accept: str, peers: str, master: str | None, timeout: float | None,
                 runtime: str = "production") -> RankOptions | None:
    """Where rank 0 of a tensor-parallel core finds its peers (`--rank-peers`, `--master`,
    `--rank-timeout`): spawned peers open the same core file with the same trust options. None for
    the reference runtime (its ranks run in lockstep in one process), which takes none of them."""
    import functools

    from helios.core import open_core

    if runtime != "production":
        if peers != "threads" or master is not None or timeout is not None:
            raise RuntimeUnavailable("--rank-peers, --master and --rank-timeout place production ranks; "
                                     "add --runtime production")
        return None

    try:
        kind = RankPeers(peers)
    except ValueError:
        raise InvalidRuntimeOptions(f"--rank-peers must be one of {[p.value for p in RankPeers]}, got {peers!r}") from None
    opener = functools.partial(open_core, str(core), trusted_keys=[str(t) for t in trust], accept=accept)
    return RankOptions(peers=kind, master=master, timeout=30.0 if timeout is None else timeout,
                       open_core=opener if kind is RankPeers.THREADS else None)


def load_state(options: ServeOptions) -> tuple[ServerState, Any]:
    """Open the core and build everything the app serves. Returns the state and the open core."""
    from helios.core import open_core

    policy = options.policy()  # a bad key file fails before the core is opened
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
        prompt_score_width=core_prompt_score_width(contract, core.manifest),
        vision=contract.model.vision,
        allow_remote_images=options.allow_remote_images,
    )
    runtime_options = RuntimeOptions(
        limits,
        gpu_memory_fraction=options.gpu_memory_fraction,
        host_cache_gib=options.host_cache_gib if options.runtime == "production" else None,
        freeze_heap=options.runtime == "production",
        wrap_executor=None if options.trace is None else trace_recorder(core, options.trace),
        speculative_width=options.speculative_width,
        speculation=options.speculation,
        adaptive_speculation=options.adaptive_speculation,
        history_drafting=options.history_drafting,
        ranks=rank_options(options.core, options.trust, options.accept, options.rank_peers, options.master,
                           options.rank_timeout, options.runtime),
    )
    runtime = load_runtime(core, options.runtime, runtime_options)
    return ServerState(runtime=runtime, preparer=preparer, policy=policy), core


def load_runtime(core: CoreSource, runtime: str, options: RuntimeOptions) -> ModelRuntime:
    """`core` on the runtime named `runtime` ("reference" or "production"), built by its factory."""
    if runtime == "reference":
        from helios.reference import load_runtime as load
    elif runtime == "production":
        from helios.production import load_runtime as load
    else:
        raise RuntimeUnavailable(f"--runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
    return load(core, options)


def trace_recorder(core: CoreSource, path: Path) -> ExecutorWrapper:
    """`--trace FILE`: wrap the served executor in the conformance trace recorder, which writes every
    submission to FILE (audit it with `helios conform MODEL --audit FILE`)."""
    from conformance.trace import TraceWriter, header_for, recorder_for

    def wrap(executor: Any, pages: int) -> Any:
        writer = TraceWriter(path)
        writer.header(header_for(core.contract, pages))
        return recorder_for(executor, core.contract, core.manifest, writer)

    return wrap
