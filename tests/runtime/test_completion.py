"""Completion validation (host only): a valid round passes in one pass of comparisons, without the
per-lane checks that build messages; every violation still raises its own error naming the slot."""

from __future__ import annotations

import dataclasses

import pytest

from helios.runtime import completion
from helios.runtime.completion import (
    AcceptedCountInvalid,
    Completion,
    CompletionRows,
    CursorInvalid,
    EndpointInvalid,
    EndpointPastReservation,
    ExecutionStatusFailed,
    GenerationMismatch,
    SampledIdOutOfRange,
    SubmissionOrderViolated,
    validate_round,
)
from helios.runtime.packing import LaneInput
from helios.runtime.request import SamplingParams


def _round(lanes: int = 8, sequence: int = 2**31 + 5):
    sampling = SamplingParams()
    out = [LaneInput(slot=i, generation=3, consumed=10, tokens=(5,), prompt_tokens_in_round=0, samples=True,
                     page_ids=(1, 2, 3), seed=0, sampling=sampling, output_limit=20, eos_ids=(1,))
           for i in range(lanes)]
    rows = [Completion(frame_index=0, submission_sequence=sequence % 2**31, generation=3, sampled_id=9, emitted=1,
                       consumed_endpoint=11, draft_cursor=-1, model_reserved=-1, status=0) for _ in out]
    return out, rows, sequence


def _check(lanes, rows, sequence):
    validate_round("decode", lanes, rows, sequence=sequence, sampled_tokens=100, page_tokens=4, frame=0)


def test_a_valid_round_takes_no_per_lane_check(monkeypatch):
    def per_lane(*args, **kwargs):
        raise AssertionError("a valid round was checked lane by lane")

    monkeypatch.setattr(completion, "validate_completion", per_lane)
    _check(*_round(lanes=64))


# One corrupted field of one lane's row, and the error that names it.
VIOLATIONS = [
    ({"status": 1}, ExecutionStatusFailed),
    ({"submission_sequence": 4}, SubmissionOrderViolated),
    ({"frame_index": 1}, SubmissionOrderViolated),
    ({"generation": 2}, GenerationMismatch),
    ({"emitted": 0}, AcceptedCountInvalid),
    ({"emitted": 2}, AcceptedCountInvalid),
    ({"consumed_endpoint": 12}, EndpointInvalid),
    ({"consumed_endpoint": 13}, EndpointPastReservation),
    ({"draft_cursor": 0}, CursorInvalid),
    ({"model_reserved": 0}, CursorInvalid),
    ({"sampled_id": 100}, SampledIdOutOfRange),
    ({"sampled_id": -1}, SampledIdOutOfRange),
]


@pytest.mark.parametrize("change, error", VIOLATIONS)
def test_every_violation_is_still_named(change, error):
    lanes, rows, sequence = _round()
    rows[5] = dataclasses.replace(rows[5], **change)
    with pytest.raises(error, match="slot 5"):
        _check(lanes, rows, sequence)


def test_a_repeated_slot_and_an_endpoint_past_the_pages_are_rejected():
    lanes, rows, sequence = _round()
    with pytest.raises(SubmissionOrderViolated, match="twice"):
        _check([*lanes[:-1], lanes[0]], rows, sequence)
    lanes[2] = dataclasses.replace(lanes[2], consumed=12, page_ids=(1, 2, 3))
    rows[2] = dataclasses.replace(rows[2], consumed_endpoint=13)
    with pytest.raises(EndpointPastReservation, match="slot 2"):
        _check(lanes, rows, sequence)


def _columns(rows):
    """The same rows as an executor reads them back: one array per field."""
    import numpy as np

    names = [f.name for f in dataclasses.fields(Completion)]
    return CompletionRows({name: np.array([getattr(r, name) for r in rows], dtype=np.int64) for name in names})


def test_completion_rows_are_the_rows_they_hold():
    _, rows, _ = _round(lanes=5)
    rows[3] = dataclasses.replace(rows[3], sampled_id=42)
    columns = _columns(rows)
    assert len(columns) == 5 and columns[3].sampled_id == 42 and list(columns) == rows
    assert columns == rows and rows == columns
    assert columns.values("sampled_id") == [9, 9, 9, 42, 9]
    (first, *_rest) = columns
    assert first == rows[0]


def test_a_valid_round_of_columns_takes_no_per_lane_check_and_builds_no_row(monkeypatch):
    def per_lane(*args, **kwargs):
        raise AssertionError("a valid round was checked lane by lane")

    monkeypatch.setattr(completion, "validate_completion", per_lane)
    lanes, rows, sequence = _round(lanes=64)
    columns = _columns(rows)
    _check(lanes, columns, sequence)
    assert columns._rows is None  # validated from the arrays alone


@pytest.mark.parametrize("change, error", VIOLATIONS)
def test_every_violation_in_columns_is_named_as_in_rows(change, error):
    lanes, rows, sequence = _round()
    rows[5] = dataclasses.replace(rows[5], **change)
    with pytest.raises(error, match="slot 5"):
        _check(lanes, _columns(rows), sequence)


def test_columns_reject_a_repeated_slot():
    lanes, rows, sequence = _round()
    with pytest.raises(SubmissionOrderViolated, match="twice"):
        _check([*lanes[:-1], lanes[0]], _columns(rows), sequence)
