"""HTTP admission (host side): at most `queue_capacity + max_active` requests at once.

Owns: `HttpAdmission` and `Permit`. A request holds its permit through CPU preparation, queueing,
generation and delivery: a finished response keeps it until the reader has received the response
(the stream ends, or the JSON body was sent). No permit: HTTP 429. Runs on the event loop thread.
"""

from __future__ import annotations

from helios.errors import HeliosError


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

    @property
    def in_use(self) -> int:
        return self._in_use

    def try_acquire(self) -> Permit | None:
        if self._in_use >= self.capacity:
            self.rejected += 1
            return None
        self._in_use += 1
        return Permit(self)
