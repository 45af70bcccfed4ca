"""The trace audit and the end-to-end level pass on a device-pending core (`--pending-token device`):
production keeps two rounds in flight, its lanes carry a placeholder where the host did not know the
pending token, and the audit replays them with production's previous samples; preemption and
readmission re-feed a device-owned token from the host like the rest of the history."""

from __future__ import annotations

import pytest

from conformance.report import LEVELS
from tests.conformance.conftest import CAPACITIES
from tests.conformance.helpers import run, workload
from tests.conformance.test_conform_passes import Observed

PIPELINED = workload(
    "pipelined",
    {"name": "greedy", "prompt": "The quick fox", "max_tokens": 7, "temperature": 0},
    {"name": "seeded", "prompt": "The quick cat", "max_tokens": 7, "temperature": 0.9, "top_k": 40, "seed": 7},
    {"name": "stops", "prompt": [5, 17, 99], "max_tokens": 4, "temperature": 1.0, "seed": 3,
     "stop_token_ids": list(range(128, 256))},
    pages=8,  # two 13-token prompts growing to 20 positions: production preempts and readmits
)
STRING_STOP = workload(
    "string_stop",
    # a stop string the tiny vocabulary never forms: the request needs feedback for its whole life
    {"name": "string", "prompt": "Stop here", "max_tokens": 6, "temperature": 1.0, "seed": 11, "stop": ["\u2603\u2603"]},
    {"name": "greedy", "prompt": "The quick", "max_tokens": 3, "temperature": 0},
)


@pytest.fixture(scope="module")
def device_core(tiny_checkpoint):
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint

    return prepare_checkpoint(tiny_checkpoint("mistral"), PreparationOptions(**CAPACITIES, pending_token="device"))


def _executor(runtime):
    return runtime._executor.executor  # the two-frame NativeExecutor under the trace recorder


def test_trace_and_e2e_pass_with_two_frames_in_flight(device_core):
    production = Observed()
    report = run(device_core, tuple(level for level in LEVELS if level != "operators"), PIPELINED,
                 production=production)
    assert report.verdict == "pass", report.table()
    assert report.level("trace").passed == 1
    (runtime,), (sink,) = production.runtimes, production.sinks
    executor = _executor(runtime)
    assert executor.peak_outstanding == 2 and executor.submissions_while_outstanding > 0
    counters = runtime.scheduler.counters
    assert counters.preemptions >= 1 and counters.readmissions >= 1
    # lanes whose pending token the host did not know when it packed them, reconstructed by the audit
    assert any(lane.pending_token == -1 for record in sink.records for lane in record.lanes)
    _production_samples_become_the_reference_state(device_core, sink.records)


def _production_samples_become_the_reference_state(core, records):
    """The replay writes production's sample into the reference's pending-token state row (what an
    adopted numeric tie needs): a last round whose sample is moved diverges, and the state holds the
    moved token."""
    from dataclasses import replace

    from conformance.audit import _Replay
    from conformance.trace import header_for

    # the last round that emitted (a request ending inside a page is followed by its publication's
    # RESTORATION round, which emits nothing)
    at = max(i for i, record in enumerate(records) if any(row.emitted for row in record.rows))
    earlier, last = records[:at], records[at]
    index = next(i for i, row in enumerate(last.rows) if row.emitted)
    moved = (last.rows[index].sampled_id + 1) % core.contract.model.vocabulary.sampled_tokens
    rows = tuple(replace(row, sampled_id=moved) if i == index else row for i, row in enumerate(last.rows))
    replay = _Replay(core, header_for(core.contract, 8), "trace/moved", "f32")
    assert all(replay.round(record) is None for record in earlier)
    found = replay.round(replace(last, rows=rows))
    assert found is not None and found.field == "sampled_id"
    assert int(replay.engine.buffers["pending_tokens"][last.lanes[index].slot]) == moved


def test_a_string_stop_keeps_one_frame_and_still_conforms(device_core):
    production = Observed()
    report = run(device_core, ("trace", "e2e"), STRING_STOP, production=production)
    assert report.verdict == "pass", report.table()
    (runtime,), (sink,) = production.runtimes, production.sinks
    executor = _executor(runtime)
    assert executor.submissions_while_outstanding == 0
    assert all(lane.pending_token != -1 for record in sink.records for lane in record.lanes)
