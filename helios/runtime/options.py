"""How to build a runtime for one core (host side): `RuntimeOptions`, what the composition root
(`helios.cli`) hands either runtime's factory (`helios.reference.load_runtime`,
`helios.production.load_runtime`). Options a runtime does not take are refused by that factory with
one line naming them."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from helios.errors import HeliosError
from helios.runtime.limits import AdmissionLimits
from helios.runtime.rounds import Executor


class InvalidRuntimeOptions(HeliosError):
    """A runtime option is out of range, or not one the selected runtime takes."""


# (the loaded executor, its physical cache pages) -> the executor the engine drives (e.g. a trace recorder)
ExecutorWrapper = Callable[[Executor, int], Executor]


class RankPeers(enum.Enum):
    """Where the peers of a tensor-parallel core's rank 0 come from (docs/ranks.md)."""

    THREADS = "threads"  # the serving host's ranks: `helios serve` spawns and joins them on loopback
    PROCESSES = "processes"  # ranks started elsewhere (torchrun, `helios rank`) join rank 0's --master


@dataclass(frozen=True, slots=True)
class RankOptions:
    """How rank 0 of a core of several tensor-parallel ranks finds its peers (production only)."""

    peers: RankPeers = RankPeers.THREADS
    master: str | None = None  # ADDR:PORT rank 0 listens on (PROCESSES: required; THREADS: a free loopback port)
    timeout: float = 30.0  # seconds a collective waits for a peer before the ranks are failed
    startup_timeout: float = 300.0  # seconds rank 0 waits for every peer to join
    # THREADS: how a spawned peer opens the core (a picklable callable returning a CoreSource)
    open_core: Callable[[], Any] | None = None
    # An extra check every peer runs on each completion it validates, raising to reject it (fault
    # injection in tests, audits); picklable, THREADS only.
    peer_check: Callable[[Any, Any], None] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.peers, RankPeers):
            raise InvalidRuntimeOptions(f"--rank-peers must be one of {[p.value for p in RankPeers]}, got {self.peers!r}")
        if self.timeout <= 0 or self.startup_timeout <= 0:
            raise InvalidRuntimeOptions(f"--rank-timeout must be > 0, got {self.timeout}")
        if self.peers is RankPeers.PROCESSES and not self.master:
            raise InvalidRuntimeOptions("--rank-peers processes needs --master ADDR:PORT (where the peers join rank 0)")


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    limits: AdmissionLimits  # admission limits, resolved against the core's defaults
    pages: int | None = None  # physical cache pages (None: the runtime sizes the cache)
    device: str | None = None  # production: "cuda", "cuda:N" or "cpu" (None: cuda when present)
    gpu_memory_fraction: float | None = None  # production: share of the GPU Helios may hold (None: 0.9)
    prefix_reuse: bool = True  # production: reuse published prefix pages across requests
    # production: GiB of host memory (pinned on a GPU) for evicted checkpoint pages (None: sized from the
    # memory available at load, capped: helios/runtime/host_cache.py; 0: no host tier)
    host_cache_gib: float | None = None
    freeze_heap: bool = False  # production: move what loading left out of the cyclic collector's reach (serving)
    wrap_executor: ExecutorWrapper | None = None  # production: wraps the executor the engine drives
    # Learned speculation on a core with a draft: the width of the SPECULATIVE graphs decoding uses
    # (None: the widest captured), or none at all (`speculation` False: plain decoding).
    speculative_width: int | None = None
    speculation: bool = True
    # Adaptive choice (`--speculative-width auto`): every captured width is loaded and each speculative
    # cohort runs the program (DECODE or a width) of the highest expected rate from the round costs the
    # executor measured at load and the acceptance observed so far; the widest width is the fallback.
    adaptive_speculation: bool = False
    # History drafting: speculative rounds also carry proposals copied from each request's own tokens
    # (a startup option; load-time selection checks the core's wider graphs take copied inputs).
    history_drafting: bool = False
    # Production, a core of several tensor-parallel ranks: where rank 0's peers come from (None: a
    # core of several ranks cannot load; the command line always gives them to production).
    ranks: RankOptions | None = None

    def __post_init__(self) -> None:
        if self.pages is not None and self.pages < 1:
            raise InvalidRuntimeOptions(f"pages must be >= 1, got {self.pages}")
        if self.host_cache_gib is not None and not self.host_cache_gib >= 0:
            raise InvalidRuntimeOptions(f"--host-cache-gib must be >= 0, got {self.host_cache_gib}")
        if self.speculative_width is not None and self.speculative_width < 1:
            raise InvalidRuntimeOptions(f"--speculative-width must be >= 1, got {self.speculative_width}")
        if self.speculative_width is not None and not self.speculation:
            raise InvalidRuntimeOptions("--speculative-width and --no-speculation exclude each other")
        if self.adaptive_speculation and self.speculative_width is not None:
            raise InvalidRuntimeOptions("--speculative-width takes one width or 'auto', not both")
        if self.adaptive_speculation and not self.speculation:
            raise InvalidRuntimeOptions("--speculative-width auto and --no-speculation exclude each other")
        if self.history_drafting and not self.speculation:
            raise InvalidRuntimeOptions("--history-drafting needs learned speculation: it excludes --no-speculation")
        if self.gpu_memory_fraction is not None and not 0.0 < self.gpu_memory_fraction <= 1.0:
            raise InvalidRuntimeOptions(f"--gpu-memory-fraction must lie in (0, 1], got {self.gpu_memory_fraction}")


def speculation_choice(width: str | int | None, no_speculation: bool) -> dict:
    """The speculation fields of `RuntimeOptions` from the command line's `--speculative-width`
    (a width, "auto" or None) and `--no-speculation`: a width is fixed; "auto", or no width at all,
    is adaptive choice (on a core with speculative programs); `--no-speculation` is plain decoding."""
    if no_speculation:
        if width is not None:
            raise InvalidRuntimeOptions("--speculative-width and --no-speculation exclude each other")
        return {"speculation": False}
    if width is None or width == "auto":
        return {"adaptive_speculation": True}
    try:
        return {"speculative_width": int(width)}
    except ValueError:
        raise InvalidRuntimeOptions(f"--speculative-width takes a width >= 1 or 'auto', got {width!r}") from None


def adaptive(captured: Sequence[int], options: RuntimeOptions) -> bool:
    """Whether decoding chooses its program adaptively: asked for, on a core that captured a width > 1."""
    return options.adaptive_speculation and options.speculation and any(w > 1 for w in captured)


def speculative_width(captured: Sequence[int], options: RuntimeOptions) -> int | None:
    """The speculative width decoding uses on a core that captured `captured` widths: None for plain
    decoding (no draft, --no-speculation, or width 1); InvalidRuntimeOptions names a width the core
    did not capture or one above its widest. Under adaptive choice: the widest, its fallback."""
    if not options.speculation or not captured:
        if options.speculative_width not in (None, 1) and not captured:
            raise InvalidRuntimeOptions(f"--speculative-width {options.speculative_width}: the core captured no "
                                        "speculative programs (prepare it with --draft)")
        return None
    width = options.speculative_width or max(captured)
    if width > max(captured):
        raise InvalidRuntimeOptions(f"--speculative-width {width} exceeds the core's widest captured width "
                                    f"{max(captured)} (captured: {', '.join(map(str, captured))})")
    if width == 1 and 1 not in captured:
        return None
    if width not in captured:
        raise InvalidRuntimeOptions(f"--speculative-width {width} was not captured by the core (captured: "
                                    f"{', '.join(map(str, captured))})")
    return width


__all__ = ["ExecutorWrapper", "InvalidRuntimeOptions", "RankOptions", "RankPeers", "RuntimeOptions", "adaptive", "speculation_choice",
           "speculative_width"]
