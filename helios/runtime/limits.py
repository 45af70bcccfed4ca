"""Admission limits (host side): how many requests a runtime and its server hold.

Owns: `AdmissionLimits` and `resolve_limits`. Core defaults (`ServingDefaults`) fill what startup
options leave out; explicit startup options win; the runtime's own defaults fill the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from helios.errors import HeliosError
from helios.proto import contract_pb2

DEFAULT_MAX_ACTIVE = 8
DEFAULT_QUEUE_CAPACITY = 64
DEFAULT_FRONTEND_WORKERS = 2
DEFAULT_EVENT_CAPACITY = 64


class InvalidLimits(HeliosError):
    """An admission limit is out of range."""


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    max_active: int = DEFAULT_MAX_ACTIVE  # requests generating concurrently
    queue_capacity: int = DEFAULT_QUEUE_CAPACITY  # ingress channel and pending deque bound
    frontend_workers: int = DEFAULT_FRONTEND_WORKERS  # CPU preparation slots
    event_capacity: int = DEFAULT_EVENT_CAPACITY  # minimum per-response event queue capacity

    def __post_init__(self) -> None:
        for name in ("max_active", "frontend_workers", "event_capacity"):
            if getattr(self, name) < 1:
                raise InvalidLimits(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.queue_capacity < 0:
            raise InvalidLimits(f"queue_capacity must be >= 0, got {self.queue_capacity}")

    @property
    def http_capacity(self) -> int:
        """Requests HTTP admission holds: preparation, queued, generating, awaiting delivery."""
        return self.queue_capacity + self.max_active


def resolve_limits(
    defaults: contract_pb2.ServingDefaults | None = None,
    *,
    max_active: int | None = None,
    queue_capacity: int | None = None,
    frontend_workers: int | None = None,
    event_capacity: int | None = None,
    max_concurrency: int | None = None,
) -> AdmissionLimits:
    """Startup options, else core defaults, else the runtime defaults. `max_concurrency` (the
    request slots the captured graphs cover, when known) caps max_active."""
    chosen: dict[str, int] = {}
    explicit = {
        "max_active": max_active,
        "queue_capacity": queue_capacity,
        "frontend_workers": frontend_workers,
        "event_capacity": event_capacity,
    }
    for name, value in explicit.items():
        if value is not None:
            chosen[name] = value
        elif defaults is not None and defaults.HasField(name):
            chosen[name] = getattr(defaults, name)
    limits = AdmissionLimits(**chosen)
    if max_concurrency and limits.max_active > max_concurrency:
        if max_active is not None:
            raise InvalidLimits(
                f"max_active {max_active} exceeds the {max_concurrency} request slots the core's graphs cover"
            )
        limits = AdmissionLimits(
            max_concurrency, limits.queue_capacity, limits.frontend_workers, limits.event_capacity
        )
    return limits
