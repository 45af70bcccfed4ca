"""A speculative round's completion is validated before any lane retires: each offer within its
lane's ceiling (its exact length for QUERY_LENGTH), the offers within P, accepted drafts within the
offer, emitted = accepted + 1, the endpoint advanced by the emitted count, the draft cursor at
max(endpoint - lag, 0) and every emitted id within the vocabulary; each violation names its field."""

from __future__ import annotations

import dataclasses

import pytest

from helios.runtime import completion as c
from helios.runtime.lanes import LaneInput
from helios.runtime.request import SamplingParams

CHECK = c.SpeculativeRound(packed_tokens=6, exact=False)


def _lane(slot, limit, consumed=10):
    return LaneInput(slot=slot, generation=3, consumed=consumed, tokens=(7,), prompt_tokens_in_round=0, samples=True,
                     page_ids=(0, 1, 2, 3), seed=1, sampling=SamplingParams(), output_limit=32, eos_ids=(1,),
                     speculative_limit=limit)


def _row(lane, offer, accepted):
    emitted = accepted + 1
    ids = tuple(range(20, 20 + emitted)) + (-1,) * (4 - emitted)
    endpoint = lane.consumed + emitted
    return c.Completion(frame_index=0, submission_sequence=5, generation=3, sampled_id=ids[0], emitted=emitted,
                        consumed_endpoint=endpoint, draft_cursor=endpoint, model_reserved=-1, status=0, offer=offer,
                        accepted_drafts=accepted, sampled_ids=ids)


def _validate(lanes, rows, check=CHECK):
    c.validate_round("speculative_b2_w4", lanes, rows, sequence=5, sampled_tokens=100, page_tokens=4, frame=0,
                     speculative=check)


def test_a_valid_round_passes_and_its_row_emits_the_accepted_run():
    lanes = [_lane(0, 4), _lane(1, 2)]
    rows = [_row(lanes[0], 4, 3), _row(lanes[1], 2, 0)]
    _validate(lanes, rows)
    assert rows[0].tokens() == (20, 21, 22, 23) and rows[1].tokens() == (20,)


@pytest.mark.parametrize("change, error, field", [
    (dict(offer=5), c.OfferInvalid, "offers 5"),
    (dict(offer=0), c.OfferInvalid, "offers 0"),
    (dict(accepted_drafts=3, emitted=4), c.AcceptedCountInvalid, "accepted_drafts 3 exceeds the offer"),
    (dict(emitted=3), c.AcceptedCountInvalid, "emitted 3"),
    (dict(consumed_endpoint=13), c.EndpointInvalid, "consumed_endpoint 13"),
    (dict(draft_cursor=11), c.CursorInvalid, "draft_cursor 11"),
    (dict(sampled_ids=(20, 200, -1, -1)), c.SampledIdOutOfRange, "sampled_ids holds 200"),
    (dict(generation=4), c.GenerationMismatch, "generation echo 4"),
])
def test_each_violation_fails_the_round_naming_its_field(change, error, field):
    lane = _lane(0, 4)
    row = dataclasses.replace(_row(lane, 3, 1), **change)
    with pytest.raises(error, match=field):
        _validate([lane], [row])


def test_offers_past_p_and_inexact_lengths_fail():
    lanes = [_lane(0, 4), _lane(1, 4)]
    with pytest.raises(c.OfferInvalid, match="offers sum to 7, past the program's 6 packed rows"):
        _validate(lanes, [_row(lanes[0], 4, 0), _row(lanes[1], 3, 0)])
    exact = c.SpeculativeRound(packed_tokens=8, exact=True)
    with pytest.raises(c.OfferInvalid, match="must be the lane's length 4"):
        _validate(lanes[:1], [_row(lanes[0], 3, 0)], exact)


def test_the_columns_path_passes_and_fails_exactly_the_rows_the_per_lane_checks_do():
    """A production executor's rows are columns (`CompletionRows`): their SPECULATIVE rounds are checked
    by array comparisons first, and any violation goes through the per-lane checks, which name it.
    Over random rounds with one random field disturbed, both forms pass or fail alike, with the same
    error."""
    import random

    rng = random.Random(11)
    fields = ("offer", "accepted_drafts", "emitted", "consumed_endpoint", "draft_cursor", "generation", "status",
              "submission_sequence", "frame_index", "model_reserved", "sampled_ids")
    outcomes = set()
    for trial in range(400):
        count = rng.randint(1, 4)
        lanes = [_lane(slot, rng.randint(1, 4), consumed=rng.randint(0, 12)) for slot in rng.sample(range(8), count)]
        rows = [_row(lane, lane.speculative_limit, rng.randrange(lane.speculative_limit)) for lane in lanes]
        if trial % 4:  # disturb one field of one row (some disturbances leave it valid)
            i, name = rng.randrange(count), rng.choice(fields)
            if name == "sampled_ids":
                ids = list(rows[i].sampled_ids)
                ids[rng.randrange(4)] = rng.choice([-2, 100, 150, 5])
                change = {name: tuple(ids)}
            else:
                change = {name: getattr(rows[i], name) + rng.choice([-2, -1, 1, 2])}
            rows[i] = dataclasses.replace(rows[i], **change)
        if trial % 7 == 0 and count > 1:  # a slot twice
            lanes[1] = dataclasses.replace(lanes[1], slot=lanes[0].slot)
        check = c.SpeculativeRound(packed_tokens=rng.randint(count, 4 * count), exact=bool(trial % 2),
                                   lag_tokens=rng.choice([0, 0, 1]))
        results = []
        for form in (rows, c.CompletionRows.of(rows)):
            try:
                _validate(lanes, form, check)
                results.append(None)
            except c.CompletionInvalid as error:
                results.append((type(error), str(error)))
        assert results[0] == results[1], (trial, results)
        outcomes.add(results[0] is None)
    assert outcomes == {True, False}  # both valid and invalid rounds were drawn
