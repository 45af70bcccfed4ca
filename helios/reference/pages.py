"""Page lookups of the reference's paged operators (host side, NumPy only): where a lane's positions
lie in a cache plane (`cache_slots`), checked against its page table and the plane, and the records
of a run of its positions (`lane_history`)."""

from __future__ import annotations

import numpy as np

from helios.errors import HeliosError


class InvalidCacheSlot(HeliosError):
    """A packed row addresses a page outside its lane's page table or outside the cache plane."""


def cache_slots(cache: np.ndarray, page_table_row: np.ndarray, positions: np.ndarray, lane: int) -> tuple:
    """(pages, slots) of `positions` of one lane: page_table_row[p // T], p % T, checked."""
    page_tokens = cache.shape[1]
    positions = np.asarray(positions, dtype=np.int64)
    logical = positions // page_tokens
    if positions.size and (positions.min() < 0 or logical.max() >= page_table_row.shape[0]):
        raise InvalidCacheSlot(
            f"lane {lane}: positions {positions.min()}..{positions.max()} need logical pages up to "
            f"{logical.max()}, its page table has {page_table_row.shape[0]}"
        )
    pages = np.asarray(page_table_row, dtype=np.int64)[logical]
    if pages.size and (pages.min() < 0 or pages.max() >= cache.shape[0]):
        raise InvalidCacheSlot(f"lane {lane}: page table names page {pages.min()}..{pages.max()} outside "
                               f"the cache plane's {cache.shape[0]} pages")
    return pages, positions % page_tokens


def lane_history(cache: np.ndarray, page_table_row: np.ndarray, first: int, last: int, lane: int) -> np.ndarray:
    """[last - first + 1, kv_heads, head_dim] entries of positions first..last of one lane."""
    pages, slots = cache_slots(cache, page_table_row, np.arange(first, last + 1), lane)
    return np.asarray(cache[pages, slots], dtype=np.float32)
