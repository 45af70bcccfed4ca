"""History drafting (host side, no torch): copied proposals found in a request's own tokens.

With `--history-drafting`, each speculative round of a lane may carry proposals copied from the
request's history (its prompt, then every emitted token): the tokens that followed the most recent
earlier occurrence of the history's last n tokens, for the longest n from `MAX_NGRAM` down to
`MIN_NGRAM` that occurred before (prompt lookup, n-gram matching); an unconstrained lane, whose
learned draft proposes where nothing is copied, copies only from DRAFTED_MIN_NGRAM matching tokens
on (`propose(..., drafted=True)`): a single matching token proposes worse than the demo pair's draft,
and one early rejected copy turned `CopiedChoice` off copies for the rest of a run (replayed on the
demo pair: 5.82 tokens a W8 round on a copying workload from single-token matches on, 6.26 from two;
`bench/history_drafting.py`). The SPECULATIVE program verifies
them like the draft's proposals (`copied_proposal`: a copied id is judged as drawn from a one-hot
row, so the round stays lossless), and the draft proposes past the copied run.

`HistoryIndex` keeps, for every n-gram of the history but those ending at its last token, the end
of its latest occurrence, updated as tokens arrive; `propose` looks the history's last n-grams up
before indexing them, so what it finds is their latest earlier occurrence. It costs `MAX_NGRAM`
dictionary lookups and the slice it returns, whatever the history's length (bounded cost per
round). An n-gram's key is one integer, its ids in `ID_BITS`-bit fields (the n-gram ending one
token later is the key shifted by a field, plus the new id), one table per length. (At 128 lanes of
W = 8 rounds, the index keyed by tuples that also kept each n-gram's previous occurrence was half
the host's round: BENCHMARKS.md, `bench/host_round.py --speculative 8 --history-drafting`.)
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_NGRAM = 4  # the longest suffix matched (and the longest an index can match)
MIN_NGRAM = 1  # the shortest (a single repeated token)
# the shortest match an unconstrained lane copies from: where only its last token matches, its
# learned draft proposes instead (module docstring)
DRAFTED_MIN_NGRAM = 2
ID_BITS = 32  # bits of one id in an n-gram's key
_BEFORE = (1 << ID_BITS) - 1  # the field of a position before the history's first token (no id has it)
_START = tuple(int(_BEFORE * sum(1 << (ID_BITS * i) for i in range(n))) for n in range(1, MAX_NGRAM))


class HistoryIndex:
    """N-gram occurrences of one request's history, extended incrementally.

    Every n-gram from 1 to MAX_NGRAM ids is indexed (four dictionary writes a token, unrolled);
    `propose` matches lengths `min_ngram` .. `max_ngram` only. The n-grams ending at the first
    tokens reach before the history: their fields there hold `_BEFORE`, so each such key exists at
    one end only, and no suffix looked up (at most as long as the history) contains it.
    """

    __slots__ = ("_latest", "_keys", "_indexed", "max_ngram", "min_ngram")

    def __init__(self, *, max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM) -> None:
        if not 1 <= min_ngram <= max_ngram <= MAX_NGRAM:
            raise ValueError(f"n-gram lengths must satisfy 1 <= min ({min_ngram}) <= max ({max_ngram}) <= {MAX_NGRAM}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        # per length n (index n - 1): n-gram key -> end of its latest indexed occurrence
        self._latest: tuple[dict[int, int], ...] = tuple({} for _ in range(MAX_NGRAM))
        self._keys = _START  # keys of the 1- to 3-grams ending at the last indexed token
        self._indexed = 0  # history tokens whose n-grams (those ending there) are indexed

    def _extend(self, history: Sequence[int], upto: int) -> None:
        """Index the n-grams ending at tokens `_indexed` .. `upto` - 1 of `history`."""
        if upto < self._indexed:  # a shorter history is another one: start over
            for table in self._latest:
                table.clear()
            self._keys, self._indexed = _START, 0
        arrived = history[self._indexed:upto]
        if not arrived:
            return
        _check_ids(arrived)
        one, two, three, four = self._latest
        k1, k2, k3 = self._keys
        for end, token in enumerate(arrived, self._indexed + 1):
            k4, k3, k2, k1 = (k3 << ID_BITS) | token, (k2 << ID_BITS) | token, (k1 << ID_BITS) | token, token
            one[k1] = end
            two[k2] = end
            three[k3] = end
            four[k4] = end
        self._keys, self._indexed = (k1, k2, k3), upto

    def propose(self, history: Sequence[int], limit: int, *, drafted: bool = False) -> tuple[int, ...]:
        """Up to `limit` ids that followed the latest earlier occurrence of `history`'s longest
        matching suffix of at least `min_ngram` ids, and of at least DRAFTED_MIN_NGRAM where a learned
        draft proposes when nothing is copied (`drafted`: an unconstrained lane); () when none
        occurred before, or `limit` < 1."""
        if limit < 1 or not history:
            return ()
        length = len(history)
        self._extend(history, length - 1)  # every n-gram but those ending at the last token
        token = history[-1]
        _check_ids((token,))
        suffix = (token, *((key << ID_BITS) | token for key in self._keys))
        shortest = max(self.min_ngram, DRAFTED_MIN_NGRAM) if drafted else self.min_ngram
        for n in range(min(self.max_ngram, length), shortest - 1, -1):
            start = self._latest[n - 1].get(suffix[n - 1])
            if start is not None:
                return tuple(history[start:start + limit])
        return ()


def _check_ids(ids: Sequence[int]) -> None:
    if min(ids) < 0 or max(ids) >= _BEFORE:
        raise ValueError(f"token ids {min(ids)}..{max(ids)} outside an n-gram key's {ID_BITS}-bit field "
                         f"(0 .. {_BEFORE - 1})")


def copied_outcome(copied: Sequence[int], offer: int, accepted_drafts: int) -> tuple[int, int]:
    """(offered, accepted) copied proposals of one lane's speculative round: the copied ids the round
    judged (its offer less the pending row, at most the copied run) and how many of them its accepted
    run holds (copied proposals come first)."""
    judged = min(len(copied), offer - 1)
    return judged, min(accepted_drafts, judged)


__all__ = ["DRAFTED_MIN_NGRAM", "ID_BITS", "MAX_NGRAM", "MIN_NGRAM", "HistoryIndex", "copied_outcome"]
