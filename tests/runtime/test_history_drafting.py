"""History drafting's proposals (helios/runtime/history_drafting.py): the tokens that followed the
latest earlier occurrence of the history's longest matching suffix, found incrementally."""

from __future__ import annotations

import random

import pytest

from helios.runtime.history_drafting import HistoryIndex


def _brute(history: list[int], limit: int, max_ngram: int = 4, min_ngram: int = 1) -> tuple[int, ...]:
    """The rule by search: longest n first, the latest occurrence ending before the history does."""
    if limit < 1:
        return ()
    for n in range(min(max_ngram, len(history)), min_ngram - 1, -1):
        suffix = history[len(history) - n:]
        for end in range(len(history) - 1, n - 1, -1):
            if history[end - n:end] == suffix:
                return tuple(history[end:end + limit])
    return ()


def test_the_longest_suffix_seen_before_gives_what_followed_it():
    index = HistoryIndex()
    history = [1, 2, 3, 4, 5, 1, 2, 3]
    assert index.propose(history, 3) == (4, 5, 1)  # "1 2 3" ended at 3 before: 4 5 1 followed
    history.append(9)  # "9" never occurred before, nor did "3 9"
    assert index.propose(history, 3) == ()
    history += [1, 2]  # "1 2": latest earlier end 7 (in "1 2 3 9"), not 2
    assert index.propose(history, 2) == (3, 9)
    assert index.propose(history, 0) == ()
    assert HistoryIndex().propose([], 4) == ()


def test_incremental_proposals_equal_a_search_over_the_whole_history():
    rng = random.Random(7)
    for _ in range(20):
        index = HistoryIndex(max_ngram=3)
        history: list[int] = []
        for _ in range(120):
            history.append(rng.randrange(6))
            limit = rng.randrange(0, 5)
            assert index.propose(history, limit) == _brute(history, limit, max_ngram=3)


def test_another_history_starts_the_index_over():
    index = HistoryIndex()
    assert index.propose([4, 5, 4], 2) == (5, 4)
    assert index.propose([7, 7], 2) == (7,)  # shorter than what was indexed: built again, nothing of 4 5 4 kept


def test_ngram_bounds_are_checked():
    with pytest.raises(ValueError, match="n-gram lengths"):
        HistoryIndex(max_ngram=1, min_ngram=2)
