"""Host-side pieces without a runtime: the numeric-tie rule of one draw, tolerances, the report's
table and JSON shape, and the trace file's encoding."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from conformance.draw import DrawInputs, draw_margin, is_draw_tie
from conformance.report import CaseResult, Divergence, InvalidReport, LevelResult, Report
from conformance.tolerance import first_mismatch, tolerance
from conformance.trace import RoundRecord, TraceError, TraceHeader, TraceWriter, read_trace
from helios.runtime.completion import Completion
from helios.runtime.packing import LaneInput
from helios.runtime.request import SamplingParams
from helios.runtime.rounds import PageCopy


def test_greedy_margin_is_half_the_logit_difference():
    logits = np.array([1.0, 3.0, 2.99995, -1.0], np.float32)
    margin = draw_margin(DrawInputs(logits), 1, 2)
    assert margin == pytest.approx(0.000025, abs=1e-6)
    assert is_draw_tie(DrawInputs(logits), 1, 2, "f32") == (True, margin)
    assert is_draw_tie(DrawInputs(logits), 1, 0, "f32")[0] is False  # 2.0 apart: a divergence
    assert is_draw_tie(DrawInputs(logits), 1, 0, "bf16")[0] is False


def test_sampled_margin_grows_with_distance_from_the_drawn_interval():
    rng = np.random.default_rng(3)
    parameters = np.array([1.0, 1.0, 0, 0.0, 1.0, 0.0, 0.0], np.float32)
    inputs = DrawInputs(rng.standard_normal(64).astype(np.float32), parameters, np.zeros(64, np.int32),
                        np.full(2, -1, np.int32), seed=42, position=9)
    drawn = inputs.draw(inputs.logits)
    near, far = draw_margin(inputs, drawn, drawn + 1), draw_margin(inputs, drawn, drawn + 12)
    assert near is not None and far is not None and near < far
    masked = DrawInputs(inputs.logits, parameters, inputs.histogram, np.array([-1, 0], np.int32), seed=42, position=9)
    if masked.draw(masked.logits) < 32:  # an id the grammar forbids can never be a tie
        assert draw_margin(masked, masked.draw(masked.logits), 40) is None


def test_tolerances_and_mismatches():
    assert tolerance("f32").relative == 1e-5 and tolerance("bf16").relative == 1e-2
    assert first_mismatch(np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-6]), 1e-5) is None
    assert first_mismatch(np.array([[1, 2], [3, 4]]), np.array([[1, 2], [3, 5]]), None) == (1, 1)
    assert first_mismatch(np.array([np.nan, np.inf]), np.array([np.nan, np.inf]), 1e-5) is None
    assert first_mismatch(np.zeros(3), np.zeros(4), 1e-5) == ()


def test_report_table_and_json_shape():
    divergence = Divergence("trace/mixed", "sampled_id", 17, 42, round=5, lane=1, margin=0.25, detail="slot 1")
    tie = Divergence("mixed/r2", "token_ids", 3, 4, round=2, lane=2, margin=1e-6)
    report = Report((LevelResult("trace", (CaseResult("trace/mixed", "divergence", divergence),)),
                     LevelResult("e2e", (CaseResult("mixed/r1", "pass"), CaseResult("mixed/r2", "numeric tie",
                                                                                     None, (tie,))))))
    data = json.loads(report.to_json())
    assert data == {"verdict": "divergence", "levels": [
        {"level": "trace", "cases": 1, "passed": 0, "numeric_ties": 0, "divergences": [
            {"case": "trace/mixed", "round": 5, "lane": 1, "field": "sampled_id", "reference": 17,
             "production": 42, "margin": 0.25}]},
        {"level": "e2e", "cases": 2, "passed": 1, "numeric_ties": 1, "divergences": []}]}
    assert report.exit_code == 1
    table = report.table()
    assert "sampled_id" in table and "numeric tie" in table and table.splitlines()[0].startswith("level")
    with pytest.raises(InvalidReport):
        CaseResult("x", "divergence")
    with pytest.raises(InvalidReport):
        LevelResult("speed", ())


def test_trace_encoding_round_trips_and_rejects_other_formats():
    lane = LaneInput(slot=1, generation=3, consumed=4, tokens=(9, 8), prompt_tokens_in_round=1, samples=True,
                     page_ids=(5, 2), seed=-7, sampling=SamplingParams(temperature=0.5, seed=-7), output_limit=6,
                     eos_ids=(1,), prompt_token_ids=(1, 2, 3, 4, 9), grammar_mask=(-1, 5))
    row = Completion(0, 12, 3, 77, 1, 6, -1, -1, 0)
    histogram = np.zeros((1, 300), np.int32)
    histogram[0, 9] = 2
    record = RoundRecord(1, "decode_b2", 0, (lane,), {"lane_prompt_histogram": ((1,), histogram),
                                                     "lane_live": ((), np.array([1], np.int32))}, (row,),
                         sequence=12, copies=(PageCopy(False, 3, 1), PageCopy(False, 0, 2, continuation=True),
                                              PageCopy(True, 4, 1)))
    stream = io.StringIO()
    writer = TraceWriter(stream)
    writer.header(TraceHeader("tiny", "abc", 8, 2))
    writer.round(record)
    stream.seek(0)
    header, rounds = read_trace(stream)
    (back,) = list(rounds)
    assert header == TraceHeader("tiny", "abc", 8, 2)
    assert back.lanes == (lane,) and back.rows == (row,) and back.sequence == 12
    assert back.copies == record.copies  # a continuation row's offload keeps its kind
    rows, values = back.transport["lane_prompt_histogram"]
    assert rows == (1,) and np.array_equal(values, histogram) and values.dtype == np.int32
    assert len(stream.getvalue()) < 1500  # histograms compress
    with pytest.raises(TraceError):
        read_trace(io.StringIO('{"format": "other", "version": 1}\n'))


def test_conformance_host_modules_import_without_torch():
    import subprocess
    import sys
    from pathlib import Path

    probe = ("import sys\n"
             "for blocked in ('torch', 'triton'):\n"
             "    sys.modules[blocked] = None\n"
             "import conformance.report, conformance.tolerance, conformance.draw, conformance.workload\n"
             "import conformance.trace, conformance.audit, conformance.e2e, conformance.runner, conformance.operators\n")
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
