"""Per-position grammar masks of copied proposals (`constrained_proposal`), through llguidance on the
host: at every start of a reasoning-then-answer document, the mask of each position of a proposed
run equals what a fresh matcher gives after consuming the whole prefix, across the reasoning close
delimiter too; the request's own grammar is left as it was; a forbidden proposal or an EOS id ends
the run there; a complete grammar proposes nothing."""

from __future__ import annotations

import pytest

from helios.frontend.structured import JSON_SCHEMA, StructuredOutput, build_grammar
from helios.frontend.syntaxes import frontend_for
from helios.runtime.proposal_masks import allows, constrained_proposal
from tests.frontend.test_structured_grammar import ADDED, COMPILER, EOS, SCHEMA, tokens

FRONTEND = frontend_for("qwen-coder", "think")
GRAMMAR = build_grammar(FRONTEND, StructuredOutput(JSON_SCHEMA, schema=SCHEMA), token_id=ADDED.get, eos_ids=[EOS])
DOCUMENT = tokens('<think>go on</think>\n\n{"ok":true,"n":3}')
CLOSE = ADDED["</think>"]


def _after(prefix: list[int]):
    state = COMPILER.state(GRAMMAR)
    for token in prefix:
        state.advance(token)
    return state


@pytest.mark.parametrize("start", range(len(DOCUMENT) - 1))
def test_each_position_masks_as_a_fresh_matcher_after_its_prefix(start):
    state = _after(DOCUMENT[:start])
    before = state.mask()
    run = DOCUMENT[start:start + 4]
    kept, masks = constrained_proposal(state, run, {EOS})
    assert kept == tuple(run) and len(masks) == len(run) + 1
    for k, mask in enumerate(masks):
        assert mask == _after(DOCUMENT[:start + k]).mask(), (start, k)
    assert state.mask() == before and state.consumed == start  # the request's grammar did not move


def test_the_constraint_changes_right_after_a_proposed_close_delimiter():
    at = DOCUMENT.index(CLOSE)
    kept, masks = constrained_proposal(_after(DOCUMENT[:at - 1]), DOCUMENT[at - 1:at + 3], {EOS})
    assert CLOSE in kept
    reasoning, answer = masks[1], masks[2]  # the close delimiter's own mask, then the one after it
    assert allows(reasoning, CLOSE) and allows(reasoning, tokens("x")[0])
    assert not allows(answer, tokens("x")[0]) and allows(answer, tokens("{")[0])


def test_a_forbidden_proposal_ends_the_run():
    start = DOCUMENT.index(tokens("{")[0])
    run = [*DOCUMENT[start:start + 2], tokens("x")[0], *DOCUMENT[start + 3:start + 5]]  # {" then x: not a key
    kept, masks = constrained_proposal(_after(DOCUMENT[:start]), run, {EOS})
    assert kept == tuple(run[:2]) and len(masks) == 3
    assert not allows(masks[2], run[2])


def test_the_run_stops_before_an_eos_id_and_a_complete_grammar_proposes_nothing():
    state = _after(DOCUMENT)
    kept, masks = constrained_proposal(state, [EOS, EOS], {EOS})
    assert kept == () and len(masks) == 1 and allows(masks[0], EOS)
    kept, masks = constrained_proposal(state, tokens("x"), {EOS})  # only EOS may follow the document
    assert kept == () and not allows(masks[0], tokens("x")[0])
    middle = _after(DOCUMENT[:3])
    kept, _ = constrained_proposal(middle, [DOCUMENT[3], EOS, DOCUMENT[4]], {EOS})
    assert kept == (DOCUMENT[3],)


class _Refusing:
    """A grammar whose mask allows everything but whose matcher refuses one id (a mask and matcher
    that disagree): the proposal stops there instead of failing the scheduler."""

    def __init__(self, refused: int) -> None:
        self.refused = refused

    def mask(self):
        return (-1,) * 10

    def advance(self, token: int) -> None:
        if token == self.refused:
            raise ValueError(f"token {token} refused")

    def fork(self):
        return self


def test_a_proposal_the_matcher_refuses_ends_the_run_quietly():
    kept, masks = constrained_proposal(_Refusing(5), [3, 4, 5, 6], set())
    assert kept == (3, 4) and len(masks) == 3
