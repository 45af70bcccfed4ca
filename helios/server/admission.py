"""HTTP admission (host side): at most `queue_capacity + max_active` requests at once.

Owns: `HttpAdmission` and `Permit`. A request holds its permit through CPU preparation, queueing,
generation and delivery: a finished response keeps it until the reader has received the response
(the stream ends, or the JSON body was sent). No permit: HTTP 429. Runs on the event loop thread.

It also measures its drain rate (permits returned per second over the last `RATE_WINDOW` returns),
from which `retry_after` estimates when a request turned away now would find room: the time the
held requests take to drain at that rate, in whole seconds within [1, MAX_RETRY_AFTER_S].
"""

from __future__ import annotations

import collections
import math
import time

from helios.errors import HeliosError

RATE_WINDOW = 64  # permit returns the drain rate is measured over
MAX_RETRY_AFTER_S = 60


class AdmissionClosed(HeliosError):
    """Permits are no longer handed out (the server is shutting down)."""


class Permit:
    __slots__ = ("_admission", "_released")

    def __init__(self, admission: HttpAdmission) -> None:
        self._admission = admission
        self._released = False

    def release(self) -> None:
        """Idempotent: the first call returns the permit."""
        if not self._released:
            self._released = True
            self._admission._in_use -= 1
            self._admission._returned.append(time.monotonic())

    @property
    def released(self) -> bool:
        return self._released


class HttpAdmission:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"HTTP admission capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._in_use = 0
        self.rejected = 0  # 429s answered
        self._returned: collections.deque[float] = collections.deque(maxlen=RATE_WINDOW)  # monotonic s

    @property
    def in_use(self) -> int:
        return self._in_use

    def try_acquire(self) -> Permit | None:
        if self._in_use >= self.capacity:
            self.rejected += 1
            return None
        self._in_use += 1
        return Permit(self)

    def drain_rate(self) -> float | None:
        """Permits returned per second over the last returns (None before two returns)."""
        if len(self._returned) < 2:
            return None
        span = self._returned[-1] - self._returned[0]
        # NOTE: the window ends now, not at the last return: a stalled server drains at a falling rate
        span = max(span, time.monotonic() - self._returned[0], 1e-3)
        return (len(self._returned) - 1) / span

    def retry_after(self) -> int:
        """Seconds (the `Retry-After` value) until the requests held now would have drained."""
        rate = self.drain_rate()
        if rate is None:
            return 1
        return max(1, min(MAX_RETRY_AFTER_S, math.ceil(self._in_use / rate)))
