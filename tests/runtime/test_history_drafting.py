"""History drafting's proposals (helios/runtime/history_drafting.py): the tokens that followed the
latest earlier occurrence of the history's longest matching suffix, found incrementally."""

from __future__ import annotations

import random

import pytest

from helios.runtime.history_drafting import DRAFTED_MIN_NGRAM, ID_BITS, MAX_NGRAM, HistoryIndex

ID_LIMIT = (1 << ID_BITS) - 2  # the largest id a key field holds


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


@pytest.mark.parametrize(("min_ngram", "max_ngram"), [(1, 4), (1, 3), (2, 4), (1, 1), (4, 4)])
def test_incremental_proposals_equal_a_search_over_the_whole_history(min_ngram, max_ngram):
    """Tokens arrive one or several at a time, proposals are asked after some arrivals and not
    others, ids include 0 and the largest a key field holds (a history's first n-grams reach before
    it: their keys must match nothing later)."""
    rng = random.Random(7 + 10 * min_ngram + max_ngram)
    for _ in range(12):
        index = HistoryIndex(min_ngram=min_ngram, max_ngram=max_ngram)
        history: list[int] = []
        alphabet = [0, 1, 2, 3, 4, ID_LIMIT][:rng.randrange(2, 7)]
        for _ in range(100):
            history += [rng.choice(alphabet) for _ in range(rng.choice((1, 1, 2, 5)))]
            if rng.random() < 0.7:
                limit = rng.randrange(0, 5)
                assert index.propose(history, limit) == _brute(history, limit, max_ngram, min_ngram), history


def test_ids_outside_a_key_field_are_refused():
    with pytest.raises(ValueError, match="outside an n-gram key"):
        HistoryIndex().propose([3, ID_LIMIT + 1], 2)
    with pytest.raises(ValueError, match="outside an n-gram key"):
        HistoryIndex().propose([-1, 3, 4], 2)


def test_another_history_starts_the_index_over():
    index = HistoryIndex()
    assert index.propose([4, 5, 4], 2) == (5, 4)
    assert index.propose([7, 7], 2) == (7,)  # shorter than what was indexed: built again, nothing of 4 5 4 kept


def test_a_shortest_match_leaves_out_shorter_ones():
    """An unconstrained lane copies only after DRAFTED_MIN_NGRAM matching tokens (its draft proposes
    where only the last token matches); the index's own bound still holds."""
    index = HistoryIndex()
    assert index.propose([4, 5, 4], 2) == (5, 4)  # the last token alone matched
    assert DRAFTED_MIN_NGRAM == 2
    assert index.propose([4, 5, 4], 2, drafted=True) == ()
    assert index.propose([4, 5, 4, 5], 2, drafted=True) == (4, 5)
    assert HistoryIndex(min_ngram=3).propose([4, 5, 4, 5], 2, drafted=True) == ()  # "4 5" is shorter than 3


def test_ngram_bounds_are_checked():
    with pytest.raises(ValueError, match="n-gram lengths"):
        HistoryIndex(max_ngram=1, min_ngram=2)
    with pytest.raises(ValueError, match="n-gram lengths"):
        HistoryIndex(max_ngram=MAX_NGRAM + 1)
