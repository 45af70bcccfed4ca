"""The offline replay of speculative rounds (bench/history_drafting.py) counts what the SPECULATIVE
program would emit, and the serving bench's copying workload (bench/speculative_serving.py) is what
it says: stand-in drafts and histories with known outcomes, no model."""

from __future__ import annotations

import math
import re

import pytest

from bench.history_drafting import replay
from bench.speculative_serving import repetitive_bodies
from helios.runtime.history_drafting import HistoryIndex, copied_outcome

OUT = [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]


def _taking(log):
    def choose(copied):
        def observe(run, limit, kept):
            log.append((tuple(run), limit, kept))
        return copied, observe
    return choose


@pytest.mark.parametrize("width", [2, 4, 8])
def test_a_draft_always_wrong_emits_one_token_a_round(width):
    rounds, emitted = replay([1, 2], OUT, width, None, _taking([]), lambda prefix, n: (0,) * n)
    assert (rounds, emitted) == (len(OUT), len(OUT))  # the prefill's token, then one a round


@pytest.mark.parametrize("width", [2, 4, 8])
def test_a_perfect_draft_emits_a_full_round_each_time(width):
    prompt = [1, 2]

    def oracle(prefix, n):
        done = len(prefix) - len(prompt)
        return tuple(OUT[done:done + n])

    rounds, emitted = replay(prompt, OUT, width, None, _taking([]), oracle)
    assert emitted == len(OUT) and rounds == 1 + math.ceil((len(OUT) - 1) / width)


def test_copies_of_the_prompt_are_verified_first_and_observed_as_the_runtimes_do():
    """The completion repeats the prompt: every round copies its proposals, all are kept, and the
    observer sees each round's copied run, its limit and the proposals kept."""
    prompt = [3, 4] + OUT + [5]
    log = []
    index = HistoryIndex()
    rounds, emitted = replay(prompt, OUT, 4, index.propose, _taking(log), lambda prefix, n: (0,) * n)
    assert emitted == len(OUT)
    first = log[0]
    assert first[0] == (8, 9, 10) and first[2] == 3  # after the prefill's 7: what followed the prompt's 7
    assert all(kept == len(run) == limit - 1 for run, limit, kept in log)
    assert copied_outcome(first[0], first[1], first[2]) == (3, 3)
    assert rounds == 1 + len(log)


def test_the_copying_workload_asks_to_copy_capital_letter_texts():
    bodies = repetitive_bodies(40)
    assert bodies == repetitive_bodies(40)  # seeded
    for body in bodies:
        (message,) = body["messages"]
        text = re.fullmatch(r"(?:Copy this exactly: |Repeat this exactly: |Please echo this: |Say back )"
                            r"((?:[A-Z]{6,12} ?){2,4}?)(?: exactly\.)?", message["content"])
        assert text is not None, message["content"]
        assert 2 <= len(text.group(1).split()) <= 4
