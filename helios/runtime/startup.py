"""Startup phases (host side): what a runtime's load spent, phase by phase.

Both runtimes time their load in named phases (`PhaseClock`) and report them as `StartupPhase`s:
the production runtime's `NativeModel.startup` (verify, weights, tuning, kernels, cache, graphs,
costs, host_tier: helios/production/native_model.py) and the reference runtime's
`ReferenceEngine.startup` (verify, weights, cache, tuning). `/metrics` exports them as the gauge
`helios_startup_seconds{phase}`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StartupPhase:
    name: str  # e.g. verify, weights, tuning, kernels, cache, graphs, costs, host_tier
    seconds: float


class PhaseClock:
    """Times the phases of one load, in order; `fence` (e.g. a device synchronization) runs at the
    end of each phase, inside its time, so work a phase enqueued is counted in that phase."""

    def __init__(self, fence: Callable[[], None] | None = None) -> None:
        self.phases: list[StartupPhase] = []
        self._fence = fence

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase `name` (a block that raises records nothing)."""
        start = time.perf_counter()
        yield
        if self._fence is not None:
            self._fence()
        self.phases.append(StartupPhase(name, time.perf_counter() - start))


def startup_seconds(phases: tuple[StartupPhase, ...] | list[StartupPhase]) -> dict[str, float]:
    """Phase name -> seconds, in load order (a phase timed twice: its times added)."""
    seconds: dict[str, float] = {}
    for p in phases:
        seconds[p.name] = seconds.get(p.name, 0.0) + p.seconds
    return seconds
