"""The observation clock (host side): token timestamps and the performance object's times.

Owns: `ObservationClock`, nanoseconds relative to a process-local monotonic origin fixed when the
runtime starts. Only observed (timed) requests read it per token.
"""

from __future__ import annotations

import time


class ObservationClock:
    __slots__ = ("_origin",)

    def __init__(self) -> None:
        self._origin = time.monotonic_ns()

    def restart(self) -> None:
        """Fix the origin at runtime start."""
        self._origin = time.monotonic_ns()

    def now_ns(self) -> int:
        return time.monotonic_ns() - self._origin
