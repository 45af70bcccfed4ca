"""History drafting (host side, no torch): copied proposals found in a request's own tokens.

With `--history-drafting`, each speculative round of a lane may carry proposals copied from the
request's history (its prompt, then every emitted token): the tokens that followed the most recent
earlier occurrence of the history's last n tokens, for the longest n from `MAX_NGRAM` down to
`MIN_NGRAM` that occurred before (prompt lookup, n-gram matching). The SPECULATIVE program verifies
them like the draft's proposals (`copied_proposal`: a copied id is judged as drawn from a one-hot
row, so the round stays lossless), and the draft proposes past the copied run.

`HistoryIndex` keeps, for every n-gram of the history, the end of its latest and of its previous
occurrence, updated as tokens arrive: `propose` costs `MAX_NGRAM` dictionary lookups and the slice
it returns, whatever the history's length (bounded cost per round).
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_NGRAM = 4  # the longest suffix matched
MIN_NGRAM = 1  # the shortest (a single repeated token)


class HistoryIndex:
    """N-gram occurrences of one request's history, extended incrementally."""

    __slots__ = ("_ends", "_indexed", "max_ngram", "min_ngram")

    def __init__(self, *, max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"n-gram lengths must satisfy 1 <= min ({min_ngram}) <= max ({max_ngram})")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self._ends: dict[tuple[int, ...], tuple[int, int]] = {}  # n-gram -> (latest end, previous end or -1)
        self._indexed = 0  # history tokens indexed so far

    def _extend(self, history: Sequence[int]) -> None:
        if len(history) < self._indexed:  # a shorter history is another one: start over
            self._ends.clear()
            self._indexed = 0
        ends = self._ends
        for end in range(self._indexed + 1, len(history) + 1):
            for n in range(self.min_ngram, min(self.max_ngram, end) + 1):
                key = tuple(history[end - n:end])
                latest = ends.get(key)
                ends[key] = (end, latest[0] if latest is not None else -1)
        self._indexed = len(history)

    def propose(self, history: Sequence[int], limit: int) -> tuple[int, ...]:
        """Up to `limit` ids that followed the latest earlier occurrence of `history`'s longest
        matching suffix (() when none occurred before, or `limit` < 1)."""
        if limit < 1 or not history:
            return ()
        self._extend(history)
        length = len(history)
        for n in range(min(self.max_ngram, length), self.min_ngram - 1, -1):
            entry = self._ends.get(tuple(history[length - n:]))
            if entry is None:
                continue
            latest, previous = entry
            start = previous if latest == length else latest
            if start > 0:
                return tuple(history[start:start + limit])
        return ()


def copied_outcome(copied: Sequence[int], offer: int, accepted_drafts: int) -> tuple[int, int]:
    """(offered, accepted) copied proposals of one lane's speculative round: the copied ids the round
    judged (its offer less the pending row, at most the copied run) and how many of them its accepted
    run holds (copied proposals come first)."""
    judged = min(len(copied), offer - 1)
    return judged, min(accepted_drafts, judged)


__all__ = ["MAX_NGRAM", "MIN_NGRAM", "HistoryIndex", "copied_outcome"]
