"""Delimiter scanning over streamed text (host side), shared by the output parsers.

A parser keeps a small text buffer; these helpers find the earliest delimiter in it, or tell how
much of its end must stay buffered because it may still begin a delimiter. Both are pure functions
of the buffer, so a parser fed the same text in any splitting reaches the same decisions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable


def find_first(buffer: str, delimiters: Iterable[str]) -> tuple[int, str] | None:
    """The earliest delimiter occurrence (ties: the longest delimiter), or None."""
    best: tuple[int, int, str] | None = None
    for delimiter in delimiters:
        if not delimiter:
            continue
        index = buffer.find(delimiter)
        if index >= 0 and (best is None or (index, -len(delimiter)) < (best[0], best[1])):
            best = (index, -len(delimiter), delimiter)
    return None if best is None else (best[0], best[2])


def held_suffix(buffer: str, delimiters: Iterable[str]) -> int:
    """Length of the longest suffix of `buffer` that is a proper prefix of a delimiter."""
    longest = 0
    for delimiter in delimiters:
        for k in range(min(len(delimiter) - 1, len(buffer)), longest, -1):
            if buffer.endswith(delimiter[:k]):
                longest = k
                break
    return longest


def json_string_fragment(text: str) -> str:
    """`text` escaped as the inside of a JSON string. Escaping is per character, so fragments of
    a value concatenate to the escaping of the whole value."""
    return json.dumps(text, ensure_ascii=False)[1:-1]
