"""Per-position grammar masks of copied proposals (host side, no torch): `constrained_proposal`.

A grammar-constrained lane speculates only over proposals the host knows before the round: its
copied ones (history drafting). For each target row k of its round (k = 0 .. len(kept)) the host
gives the mask of the token at position consumed + k + 1, the one after the pending token and the
first k kept proposals (`CANDIDATE_GRAMMAR_MASKS`), computed on a fork of the request's grammar: the
request's own matcher is never advanced here, so the round cannot desynchronize it; the worker
advances it with each delivered token, as in plain decoding.

    pending  c1  c2  c3                     copied proposals, c3 forbidden after c1 c2
    mask0    mask1  mask2                   mask k: after pending + c1..ck (the fork's next mask)
    kept = (c1, c2): the run stops at the first proposal its position's mask forbids, and before the
    first EOS id (the stop barrier: nothing after it is ever delivered)

A reasoning close delimiter or a tool opener inside the run is just a token the fork consumes: the
masks before it are the reasoning's (free text), those after it the answer's or the call's, so the
constraint changes at exactly that position, as it does token by token in plain decoding.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from helios.runtime.interface import GrammarMatcher


def allows(mask: Sequence[int], token: int) -> bool:
    """Whether int32 mask words allow `token` (bit token % 32 of word token // 32)."""
    word = token // 32
    return 0 <= token and word < len(mask) and bool((mask[word] >> (token % 32)) & 1)


def constrained_proposal(grammar: GrammarMatcher, copied: Sequence[int],
                         stop_ids: Collection[int]) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """(the leading copied ids the lane may propose, the masks of positions 0 .. len(kept)). The run
    ends at the first id its position's mask forbids, that the fork refuses, or that is one of
    `stop_ids` (EOS); the request's grammar is left exactly as it was."""
    fork = grammar.fork()
    masks = [tuple(fork.mask())]
    kept: list[int] = []
    for token in copied:
        if token in stop_ids or not allows(masks[-1], token):
            break
        try:
            fork.advance(token)
        except Exception:  # NOTE: refused though its mask allowed it: not proposable
            # (plain decoding would fail the request on this token at delivery, and so does a round
            # whose target emits it; only the proposal stops here, the scheduler never fails)
            break
        kept.append(token)
        masks.append(tuple(fork.mask()))
    return tuple(kept), tuple(masks)


__all__ = ["allows", "constrained_proposal"]
