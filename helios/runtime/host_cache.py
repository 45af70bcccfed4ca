"""The host tier's size (host side, no torch): how many evicted checkpoint pages host memory holds.

    pages = host_pages(gib, page_bytes)                  # `--host-cache-gib GIB` (None: the default)
    pages = within_device(pages, gib, device_pages)      # the default, once the device cache is sized

`--host-cache-gib` bounds the host tier in bytes; 0 disables it. Without the option the tier takes a
quarter of the host memory available at load (`MemAvailable`), at most `DEFAULT_CAP_GIB`, and at
most `DEFAULT_DEVICE_RATIO` times the device cache's pages (as SGLang's hierarchical cache sizes its
host pool from the device pool: a small device cache gets a small tier, whose pinned allocation
would otherwise cost seconds of startup for pages it cannot fill). A page is
`page_bytes`: one page of every cache plane of every rank, as the executor holds it. The tier holds
`floor(bytes / page_bytes)` pages and never more: the engine's `HostTier` (helios/engine/host_tier.py)
is built with that count and evicts before it would grow past it.
"""

from __future__ import annotations

import os

from helios.errors import HeliosError

GIB = 1 << 30
DEFAULT_CAP_GIB = 4.0  # the default tier takes at most this much host memory
DEFAULT_SHARE = 0.25  # ... and at most this share of the memory available at load
DEFAULT_DEVICE_RATIO = 2  # ... and at most this many times the device cache's pages


class InvalidHostCache(HeliosError):
    """`--host-cache-gib` is negative or not a number."""


def available_host_bytes() -> int:
    """Host memory available now (`MemAvailable` of /proc/meminfo; where there is none, the free
    physical pages); 0 when neither can be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return 0


def host_bytes(gib: float | None, *, available: int | None = None) -> int:
    """The tier's byte bound: `gib` GiB, or the default from `available` bytes (read when None)."""
    if gib is None:
        free = available_host_bytes() if available is None else available
        return int(min(free * DEFAULT_SHARE, DEFAULT_CAP_GIB * GIB))
    if not isinstance(gib, int | float) or gib != gib or gib < 0:
        raise InvalidHostCache(f"--host-cache-gib must be a number >= 0, got {gib!r}")
    return int(gib * GIB)


def host_pages(gib: float | None, page_bytes: int, *, available: int | None = None) -> int:
    """Pages of `page_bytes` the tier holds within `host_bytes(gib)` (0: no tier)."""
    if page_bytes < 1:
        return 0
    return host_bytes(gib, available=available) // page_bytes


def within_device(pages: int, gib: float | None, device_pages: int) -> int:
    """`host_pages`' answer, the default size (`gib` None) bounded by `DEFAULT_DEVICE_RATIO` times the
    device cache's `device_pages`; an explicit size is taken as given."""
    return min(pages, DEFAULT_DEVICE_RATIO * device_pages) if gib is None else pages


__all__ = ["DEFAULT_CAP_GIB", "DEFAULT_DEVICE_RATIO", "DEFAULT_SHARE", "GIB", "InvalidHostCache",
           "available_host_bytes", "host_bytes", "host_pages", "within_device"]
