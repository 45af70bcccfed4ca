"""All three levels pass on a tiny core with zero divergences: every operator of the registry, and
a workload with greedy and seeded requests, shared prefixes, chunked prefill, string and token stops
and page pressure (production preempts), traced and compared end to end."""

from __future__ import annotations

import json

from conformance.report import LEVELS
from conformance.trace import TraceList, read_trace
from conformance.workload import load_workloads
from helios.program import OPERATORS
from tests.conformance.helpers import run, workload

PRESSURE = workload(
    "pressure",
    {"name": "greedy", "prompt": "The quick fox", "max_tokens": 6, "temperature": 0},
    {"name": "seeded", "prompt": "The quick cat", "max_tokens": 6, "temperature": 0.9, "top_k": 40, "seed": 7},
    {"name": "stops", "prompt": [5, 17, 99], "max_tokens": 4, "temperature": 1.0, "seed": 3,
     "stop_token_ids": list(range(128, 256))},
    {"name": "string", "prompt": "Stop here", "max_tokens": 3, "temperature": 1.0, "seed": 11, "stop": ["\ufffd", "e"]},
    pages=8,  # two 13-token prompts are admitted together; growing to 18 positions preempts and readmits
)


class Observed:
    """Production as conform runs it, keeping each runtime so the test can look at its counters."""

    def __init__(self) -> None:
        from conformance.runner import Production
        from tests.conformance.conftest import DEVICE

        self.inner = Production(DEVICE)
        self.runtimes: list = []
        self.sinks: list = []

    def runtime(self, core, workload, sink):
        runtime, header = self.inner.runtime(core, workload, sink)
        self.runtimes.append(runtime)
        self.sinks.append(sink)
        return runtime, header


def test_every_level_passes_with_zero_divergences(conform_core):
    production = Observed()
    report = run(conform_core, LEVELS, PRESSURE, production=production)
    assert report.verdict == "pass", report.table()
    assert report.exit_code == 0
    operators = report.level("operators")
    assert {case.case.split("/")[0] for case in operators.cases} >= set(OPERATORS)
    assert report.level("trace").passed == 1
    assert report.level("e2e").passed + report.level("e2e").numeric_ties == len(PRESSURE.requests)
    data = json.loads(report.to_json())
    assert data["verdict"] == "pass" and [level["level"] for level in data["levels"]] == list(LEVELS)
    assert all(level["divergences"] == [] for level in data["levels"])
    # The pass means something only if production met pressure, chunks, cohorts and stops.
    (runtime,), (sink,) = production.runtimes, production.sinks
    counters = runtime.scheduler.counters
    assert counters.preemptions >= 1 and counters.readmissions >= 1 and counters.reused_tokens > 0
    assert any(len(record.lanes) > 1 for record in sink.records)  # cohorts of two lanes ran
    assert any(len(lane.tokens) == 8 for record in sink.records for lane in record.lanes)  # chunked prefill


def test_the_shipped_cases_are_valid_data():
    workloads = load_workloads()
    assert {w.name for w in workloads} >= {"mixed", "pressure"}
    kinds = {key for w in workloads for r in w.requests for key in r.body}
    assert {"stop", "stop_token_ids", "stop_token_sequences", "seed", "temperature"} <= kinds


def test_a_trace_file_round_trips_and_audits(conform_core, tmp_path):
    from conformance.audit import audit_trace
    from conformance.runner import write_trace

    small = workload("small", {"prompt": [9, 8, 7, 6, 5], "max_tokens": 2, "temperature": 0.7, "seed": 99})
    from conformance.e2e import drive, prepare_requests
    from conformance.runner import Production
    from tests.conformance.conftest import DEVICE

    (requests,) = prepare_requests(conform_core, small, copies=1)
    sink = TraceList()
    runtime, header = Production(DEVICE).runtime(conform_core, small, sink)
    drive(runtime, requests)
    path = tmp_path / "small.trace"
    write_trace(path, header, sink.records)
    read_header, rounds = read_trace(path)
    records = list(rounds)
    assert read_header == header and [r.rows for r in records] == [r.rows for r in sink.records]
    assert [r.lanes for r in records] == [r.lanes for r in sink.records]
    assert audit_trace(conform_core, read_header, records, case="small").verdict == "pass"


def test_a_framed_executor_is_recorded_through_its_own_seam(conform_core):
    """An executor holding two frames keeps them under the recorder (the runtime must see the same
    executor it serves with); the trace then audits as any other."""
    from conformance.audit import audit_trace
    from conformance.e2e import drive, prepare_requests
    from conformance.trace import header_for, recorder_for
    from helios.contract import PreparedContract
    from helios.engine.worker import BatchingRuntime
    from helios.reference.executor import ReferenceExecutor
    from helios.runtime.limits import AdmissionLimits

    small = workload("framed", {"prompt": [4, 4, 2], "max_tokens": 3, "temperature": 0.6, "seed": 5},
                     {"prompt": [1, 9, 9, 6, 1], "max_tokens": 2, "temperature": 0})
    executor = ReferenceExecutor.load(conform_core, pages=16, frames=2)  # submission runs at once
    sink = TraceList()
    recorder = recorder_for(executor, conform_core.contract, conform_core.manifest, sink)
    assert recorder.frames == 2
    contract = PreparedContract.decode(conform_core.contract, conform_core.manifest)
    runtime = BatchingRuntime.for_executor(recorder, contract, AdmissionLimits(max_active=2), pages=16)
    (requests,) = prepare_requests(conform_core, small, copies=1)
    assert all(r.outcome == "finished" for r in drive(runtime, requests))
    assert {record.frame for record in sink.records} == {0, 1}  # two frames in use
    assert all(row.frame_index == record.frame for record in sink.records for row in record.rows)
    header = header_for(conform_core.contract, 16)
    assert audit_trace(conform_core, header, sink.records, case="framed").verdict == "pass"


def test_fusion_cases_run_the_fused_kernels():
    """The fusion cases exist to exercise production's fused kernels: they must lower to them."""
    import numpy as np
    import torch

    from conformance import operators
    from conformance.workload import load_operator_cases
    from helios.production.buffers import ScratchArena
    from helios.production.lowering import lower_program
    from helios.program.builder import ProgramBuilder
    from helios.program.validate import validate_program

    cases = operators.OperatorCases.from_json(load_operator_cases())
    rng = np.random.default_rng(0)
    seen = set()
    for op, _, cohort, build in operators.case_builders(cases):
        if op not in operators.FUSIONS or op in seen:
            continue
        seen.add(op)
        case = operators.OperatorProgram("f32", ProgramBuilder("fusion"))
        build(case, rng, cohort, cases.geometry, cases)
        program = case.builder.build()
        buffers = {name: torch.from_numpy(value.copy()) for name, value in case.values.items()}
        plan = lower_program(program, validate_program(program), weights={}, buffers=buffers,
                             arena=ScratchArena(torch.device("cpu")), device=torch.device("cpu"))
        assert plan.kernels == (op,)
    assert seen == set(operators.FUSIONS)
