"""Resource accounting: once a workload has ended, conform checks that every page, slot, round,
frame and permit is back, and a leak is a divergence naming the resource.

    a page keeps a reference when its request ends    -> trace resources.pages (names the page)
    a slot is not returned when its request ends      -> trace resources.slots
    the reference worker keeps a finished request's slot -> e2e resources.slots (reference case)
    a runtime that has not drained                    -> requests, slots, pages, rounds (unit, no kernels)
    an executor holding an uncollected round          -> resources.frames
    an HTTP permit not released                       -> resources.permits
"""

from __future__ import annotations

import asyncio

from conformance.resources import account, admission_leaks, frame_leaks
from helios.engine.page_cache import PageCache
from helios.engine.residency import RequestResidency
from helios.engine.sequential import SequentialRuntime
from tests.conformance.helpers import only_divergence, run, workload

ONE = workload("leak", {"prompt": [3, 1, 4, 1, 5], "max_tokens": 2, "temperature": 0})


def _resource_divergences(report, level):
    return [d for d in report.level(level).divergences if d.field.startswith("resources.")]


def test_a_page_that_keeps_a_reference_is_named(conform_core, monkeypatch):
    release = PageCache.release
    leaked: list[int] = []

    def keeps_one(self, pages):  # the first release of a request's pages keeps a reference on its first page
        if pages and not leaked:
            leaked.append(pages[0])
            pages = pages[1:]
        release(self, pages)

    monkeypatch.setattr(PageCache, "release", keeps_one)
    report = run(conform_core, ("trace",), ONE)
    found = only_divergence(report, "trace")
    assert found.case == "leak/resources/production" and found.field == "resources.pages", report.table()
    assert found.production == found.reference - 1
    assert f"page {leaked[0]} (1 reference)" in found.detail
    assert report.exit_code == 1


def test_a_slot_not_returned_is_named(conform_core, monkeypatch):
    free_slot = RequestResidency._free_slot
    kept: list[int] = []

    def keeps_first(self, s):
        if not kept and s.slot is not None:
            kept.append(s.slot)
            s.slot = None  # forgotten by the request, never back on the free list
            return
        free_slot(self, s)

    monkeypatch.setattr(RequestResidency, "_free_slot", keeps_first)
    report = run(conform_core, ("trace",), ONE)
    (found,) = _resource_divergences(report, "trace")
    assert found.field == "resources.slots" and found.production == found.reference - 1, report.table()
    assert f"slot(s) {kept} not returned" in found.detail
    assert report.level("trace").cases[0].verdict == "pass"  # the audit itself is innocent


def test_the_reference_runtime_is_accounted_at_the_e2e_level(conform_core, monkeypatch):
    release = SequentialRuntime._release

    def keeps_slot(self, entry):
        entry.slot = None  # the slot is dropped instead of returned
        release(self, entry)

    monkeypatch.setattr(SequentialRuntime, "_release", keeps_slot)
    report = run(conform_core, ("trace", "e2e"), ONE)
    assert _resource_divergences(report, "trace") == [], report.table()  # production returned everything
    (found,) = _resource_divergences(report, "e2e")
    assert found.case == "leak/resources/reference" and found.field == "resources.slots", report.table()


def test_a_clean_run_reports_no_resource_divergence(conform_core):
    from conformance.e2e import drive, prepare_requests, reference_runtime
    from conformance.runner import Production
    from conformance.trace import TraceList
    from tests.conformance.conftest import DEVICE

    two = workload("clean", {"prompt": [9, 8, 7, 6, 5, 4, 3, 2, 1], "max_tokens": 3, "temperature": 0},
                   {"prompt": [9, 8, 7, 6, 5, 4, 3, 2, 2], "max_tokens": 2, "temperature": 0.5, "seed": 4},
                   max_active=1, pages=6)
    production, reference = prepare_requests(conform_core, two)
    runtime, _ = Production(DEVICE).runtime(conform_core, two, TraceList())
    assert all(r.outcome == "finished" for r in drive(runtime, production))
    assert runtime.scheduler.counters.reused_tokens > 0  # a shared prefix page was referenced twice
    assert account(runtime, "clean") == []
    sequential = reference_runtime(conform_core, two)
    assert all(r.outcome == "finished" for r in drive(sequential, reference))
    assert account(sequential, "clean") == []


def test_a_runtime_that_has_not_drained_is_reported(conform_core):
    """Without kernels: a batching runtime over the reference executor with one round submitted and
    never completed holds its request, its slot, its pages and the round."""
    from helios.contract import PreparedContract
    from helios.engine.config import SchedulerRequest
    from helios.engine.worker import BatchingRuntime
    from helios.reference.executor import ReferenceExecutor
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.request import GenerationRequest

    executor = ReferenceExecutor.load(conform_core, pages=8)
    contract = PreparedContract.decode(conform_core.contract, conform_core.manifest)
    runtime = BatchingRuntime.for_executor(executor, contract, AdmissionLimits(max_active=2), pages=8)
    assert account(runtime, "idle") == []
    runtime.scheduler.add(SchedulerRequest("r", GenerationRequest((1, 2, 3, 4, 5), max_tokens=2)))
    init = runtime.scheduler.schedule()
    executor.submit(init)
    runtime.scheduler.complete(init, executor.collect(init))
    plan = runtime.scheduler.schedule()  # the prefill: its pages are reserved, its round never completes
    executor.submit(plan)
    leaks = {d.field: d for d in account(runtime, "busy")}
    assert set(leaks) == {"resources.slots", "resources.pages", "resources.requests", "resources.rounds"}
    assert leaks["resources.requests"].production == ["r"]
    assert leaks["resources.rounds"].production == [plan.sequence]
    assert leaks["resources.slots"].detail == "slot(s) [0] not returned"


def test_uncollected_frames_and_held_permits_are_named():
    from helios.server.admission import HttpAdmission

    class Inner:
        outstanding = 1

    class Wrapper:  # a recorder keeps the executor it wraps as `.executor`
        executor = Inner()

    (frames,) = frame_leaks(Wrapper(), "w")
    assert (frames.field, frames.reference, frames.production) == ("resources.frames", 0, 1)
    assert "Inner" in frames.detail
    admission = HttpAdmission(3)
    permit = admission.try_acquire()
    (permits,) = admission_leaks(admission, "http")
    assert (permits.field, permits.reference, permits.production) == ("resources.permits", 0, 1)
    permit.release()
    assert admission_leaks(admission, "http") == []


def test_a_sequential_runtime_is_read_through_its_accessors():
    """The reference's worker over a scripted engine: slots and requests come back after a drive."""
    from helios.runtime.interface import PreparedRequest
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.request import GenerationRequest
    from tests.runtime.scripted import ScriptedEngine

    runtime = SequentialRuntime(ScriptedEngine([5, 6, 7]), AdmissionLimits(max_active=2), context_tokens=32,
                                vocab_size=16)

    async def main():
        runtime.start()
        try:
            stream = runtime.submit(PreparedRequest("a", GenerationRequest((1, 2), max_tokens=3)))
            async for _ in stream:
                pass
        finally:
            runtime.shutdown()

    asyncio.run(main())
    assert account(runtime, "s") == []
    runtime._free_slots.pop()  # a slot gone from the free list
    (found,) = account(runtime, "s")
    assert found.field == "resources.slots" and (found.reference, found.production) == (2, 1)
