"""Image feature slots (host side): each request's images get slots of the feature store, within the
core's declared capacity (VisionContract.feature_slots), held by the request and released with it.

A request never holds more images than the capacity (the frontend refuses it with a 400,
`helios.frontend.image_layout.check_image_count`); one that needs more slots than are free now
waits for them, as a request waits for pages.
"""

from __future__ import annotations


class FeatureSlots:
    """Slots [0, capacity) of the feature store: allocate per request, release with it."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._held: dict[int, tuple[int, ...]] = {}
        self._free = list(range(capacity))

    def allocate(self, request: int, images: int) -> tuple[int, ...] | None:
        """`images` free slots for `request` (lowest first), or None (taking nothing) when fewer are free."""
        if not 0 <= images <= self.capacity:
            raise ValueError(f"{images} images outside the capacity of {self.capacity} feature slots")
        if request in self._held:
            raise ValueError(f"request {request} already holds feature slots")
        if images > len(self._free):
            return None
        slots, self._free = tuple(self._free[:images]), self._free[images:]
        self._held[request] = slots
        return slots

    def release(self, request: int) -> None:
        """Return the request's slots (nothing when it holds none)."""
        self._free = sorted(self._free + list(self._held.pop(request, ())))

    @property
    def free(self) -> int:
        return len(self._free)
