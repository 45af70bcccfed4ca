"""`helios conform` over snapshots: the generated `snapshot` workload (the older request's growth
preempts the younger mid-page; its partial page is snapshotted, released and restored) passes the
trace audit and the end-to-end comparison, and two realistic bugs are caught and named at the trace
level: publishing a snapshot (releasing its partial page) before its round's fence, and a restore
that copies one token short."""

from __future__ import annotations

import pytest
import torch

from conformance.generate import Geometry, _snapshot
from tests.conformance.helpers import only_divergence, run
from tests.conformance.test_conform_passes import Observed

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def snapshot_workload(conform_core):
    workload = _snapshot(conform_core, Geometry.of(conform_core))
    assert workload is not None, "no shape of the snapshot workload restores on this core"
    return workload


def test_the_snapshot_workload_passes_the_trace_and_end_to_end_levels(conform_core, snapshot_workload):
    production = Observed()
    report = run(conform_core, ("trace", "e2e"), snapshot_workload, production=production)
    assert report.verdict == "pass", report.table()
    assert report.level("trace").passed == 1
    counters = production.runtimes[-1].scheduler.counters
    assert counters.snapshots_published >= 1 and counters.snapshots_restored >= 1
    assert counters.recomputed_tokens == 0
    sink = production.sinks[-1]
    restores = [lane for record in sink.records for lane in record.lanes if lane.restore_source >= 0]
    assert restores and all(lane.consumed % 4 for lane in restores)  # restored mid-page
    assert any(record.outstanding == 2 for record in sink.records)  # two rounds in flight met the snapshots


def test_a_snapshot_published_before_its_fence_is_caught_by_the_page_rules(conform_core, snapshot_workload,
                                                                          monkeypatch):
    """The mutation preempts the victim (its partial page back to the cache, its snapshot counted) when
    its snapshot round is submitted instead of when it completes: the preemptor's next round, in the
    second frame, writes that page while the snapshot round still reads it."""
    from helios.engine.scheduler import Scheduler

    restoration_round = Scheduler._restoration_round

    def published_at_submission(self, restoring):
        plan = restoration_round(self, restoring)
        for s in list(self._cohorts[plan.sequence]):
            if s.snapshot_row is not None:
                self._retire_restoration(s)
        return plan

    monkeypatch.setattr(Scheduler, "_restoration_round", published_at_submission)
    report = run(conform_core, ("trace",), snapshot_workload)
    found = only_divergence(report, "trace")
    assert found.field == "pages" and "still outstanding" in found.detail, report.table()


def test_a_restore_one_token_short_is_caught_in_the_restored_page(conform_core, snapshot_workload, monkeypatch):
    """The mutated lowering leaves the record of the endpoint's last position (E - 1) as the fresh page
    held it: the trace audit's record of the restored page names the plane and the position."""
    from helios.production.kernels import gather
    from helios.production.lowering import operators, snapshots

    def one_token_short(c, op):
        cache, continuation, page_table, lane_slot, endpoint, rows = (c.t(n) for n in op.inputs)

        def run_it() -> None:
            valid, page, row = snapshots._lanes(cache, continuation, page_table, lane_slot, endpoint, rows)
            payload = continuation.index_select(0, row.long()).clone()
            last = torch.remainder(endpoint - 1, cache.shape[1]).long()
            lanes = torch.arange(payload.shape[0], device=payload.device)
            payload[lanes, last] = cache.index_select(0, page.long())[lanes, last]
            gather.scatter(cache, payload, torch.where(valid, page, -1))
        return run_it

    monkeypatch.setitem(operators.LOWERINGS, "page_restore", one_token_short)
    report = run(conform_core, ("trace",), snapshot_workload)
    found = only_divergence(report, "trace")
    assert found.field.startswith("cache.") and "position" in found.detail, report.table()


def test_a_continuation_row_never_returned_is_named_by_resource_accounting(conform_core, snapshot_workload,
                                                                           monkeypatch):
    """The mutation forgets to return a restored snapshot's row: the tokens are right, and resource
    accounting names the row still held once the workload has ended."""
    from helios.engine.scheduler import Scheduler

    def keeps_the_row(self, s):
        if s.restore_row is not None:
            s.restore_row = None  # the row is never given back
            self.counters.snapshots_restored += 1
        elif s.snapshot_row is not None:
            row, s.snapshot_row = s.snapshot_row, None
            self._snapshotting -= 1
            self.counters.snapshots_published += 1
            self._preempt(s, row)

    monkeypatch.setattr(Scheduler, "_retire_restoration", keeps_the_row)
    report = run(conform_core, ("trace",), snapshot_workload)
    leaks = [d for d in report.level("trace").divergences if d.field == "resources.continuation_rows"]
    assert leaks and leaks[0].case == "snapshot/resources/production", report.table()
