"""The accepted-count rules of completion validation, on both row forms (`Completion` rows and
`CompletionRows` columns), which had no test of their bounds:

- with offers (a speculative lane's reserved ceiling: target rows, the pending one included), the
  accepted count may be anything from 0 to the offer, inclusive: all drafts accepted plus the token
  drawn after them is exactly the offer; one more is rejected;
- without offers, the emitted count is the lane's sampling decision exactly: above it (2 for a
  sampling lane, 1 for a lane that does not sample) is rejected, and so is 0 for a sampling lane.
"""

from __future__ import annotations

import dataclasses

import pytest

from helios.runtime import completion
from helios.runtime.completion import AcceptedCountInvalid, validate_completion, validate_round
from tests.runtime.test_completion import _check, _columns, _round

FORMS = [pytest.param(list, id="rows"), pytest.param(_columns, id="columns")]


def _offered(rows_form, lanes, rows, sequence, offers):
    validate_round("speculative", lanes, rows_form(rows), sequence=sequence, sampled_tokens=100, page_tokens=4,
                   frame=0, offers=offers)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("emitted", [0, 1, 2, 3])
def test_an_offer_admits_every_count_up_to_itself(form, emitted):
    lanes, rows, sequence = _round()
    rows[5] = dataclasses.replace(rows[5], emitted=emitted)
    _offered(form, lanes, rows, sequence, [3] * len(lanes))


@pytest.mark.parametrize("form", FORMS)
def test_one_above_the_offer_is_rejected(form):
    lanes, rows, sequence = _round()
    rows[5] = dataclasses.replace(rows[5], emitted=4)
    with pytest.raises(AcceptedCountInvalid, match="slot 5: emitted 4 exceeds the lane's offer of 3"):
        _offered(form, lanes, rows, sequence, [3] * len(lanes))
    offers = [1] * len(lanes)
    offers[2] = 0  # a lane offered nothing accepts nothing
    with pytest.raises(AcceptedCountInvalid, match="slot 2: emitted 1 exceeds the lane's offer of 0"):
        _offered(form, *_round(), offers)


@pytest.mark.parametrize("form", FORMS)
def test_a_negative_count_is_rejected_under_an_offer(form):
    lanes, rows, sequence = _round()
    rows[1] = dataclasses.replace(rows[1], emitted=-1)
    with pytest.raises(AcceptedCountInvalid, match="slot 1: emitted -1 is negative"):
        _offered(form, lanes, rows, sequence, [3] * len(lanes))


def test_the_offer_bound_of_one_row():
    lanes, rows, sequence = _round(lanes=1)
    for emitted in (0, 1, 2):
        validate_completion("speculative", lanes[0], dataclasses.replace(rows[0], emitted=emitted),
                            sequence=sequence, sampled_tokens=100, offer=2)
    with pytest.raises(AcceptedCountInvalid, match="exceeds the lane's offer of 2"):
        validate_completion("speculative", lanes[0], dataclasses.replace(rows[0], emitted=3), sequence=sequence,
                            sampled_tokens=100, offer=2)


@pytest.mark.parametrize("form", FORMS)
def test_an_emitted_count_above_the_sampling_decision_is_rejected(form, monkeypatch):
    calls = []
    real = completion.validate_completion

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(completion, "validate_completion", counted)
    lanes, rows, sequence = _round()
    rows[5] = dataclasses.replace(rows[5], emitted=2)
    with pytest.raises(AcceptedCountInvalid, match="slot 5: emitted 2 "):
        _check(lanes, form(rows), sequence)
    assert calls  # the fast pass refused the round, the per-lane check named it
    lanes, rows, sequence = _round()
    lanes[3] = dataclasses.replace(lanes[3], samples=False)  # a prefill chunk that does not reach the end
    rows[3] = dataclasses.replace(rows[3], emitted=1)
    with pytest.raises(AcceptedCountInvalid, match="slot 3: emitted 1 "):
        _check(lanes, form(rows), sequence)
    rows[3] = dataclasses.replace(rows[3], emitted=0)
    _check(lanes, form(rows), sequence)  # emitting nothing is what that lane must do
