"""The reference snapshot operators (host side, NumPy only): `page_snapshot` and `page_restore`,
the executable definition of the copies a RESTORATION program makes between a cache plane and its
continuation plane (helios/program/snapshots.py, docs/operators.md)."""

from __future__ import annotations

import numpy as np


def continuation_pages(cache: np.ndarray, continuation: np.ndarray, page_table: np.ndarray,
                       lane_slot: np.ndarray, endpoint: np.ndarray, rows: np.ndarray) -> list[tuple[int, int]]:
    """(page, row) of every lane that copies: its row lies in the continuation plane, its slot in the
    page table, and the page-table entry holding position `endpoint` names a page of the cache plane."""
    page_tokens = cache.shape[1]
    pairs = []
    for slot, end, row in zip(np.asarray(lane_slot).tolist(), np.asarray(endpoint).tolist(),
                              np.asarray(rows).tolist(), strict=True):
        if not (0 <= row < continuation.shape[0] and 0 <= slot < page_table.shape[0] and end >= 0):
            continue
        logical = end // page_tokens
        if logical >= page_table.shape[1]:
            continue
        page = int(page_table[slot, logical])
        if 0 <= page < cache.shape[0]:
            pairs.append((page, row))
    return pairs


def page_snapshot(continuation: np.ndarray, cache: np.ndarray, page_table: np.ndarray, lane_slot: np.ndarray,
                  endpoint: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """continuation[rows[b]] = cache[page_table[lane_slot[b], endpoint[b] // T]], in place."""
    for page, row in continuation_pages(cache, continuation, page_table, lane_slot, endpoint, rows):
        continuation[row] = cache[page]
    return continuation


def page_restore(cache: np.ndarray, continuation: np.ndarray, page_table: np.ndarray, lane_slot: np.ndarray,
                 endpoint: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """cache[page_table[lane_slot[b], endpoint[b] // T]] = continuation[rows[b]], in place."""
    for page, row in continuation_pages(cache, continuation, page_table, lane_slot, endpoint, rows):
        cache[page] = continuation[row]
    return cache
