"""Resource accounting (host side): once a workload has ended, every resource a runtime lent is back.

    leaks = account(runtime, case="mixed/resources/production")   # after drive(): the worker has exited
    cases = resource_cases(leaks)                                  # one divergence case per leak

`account` inspects a finished runtime through its read-only accessors and returns one `Divergence`
per resource not returned. The divergence's `reference` is the expected value and `production` the
value found (for the reference runtime too: the case names which runtime leaked):

    resources.pages      pages free or cached = capacity, and no page referenced (the detail names
                         the pages still referenced and their reference counts)
    resources.slots      every request slot on the free list, once
    resources.requests   the scheduler (or the sequential worker) holds no request
    resources.progress   the batching runtime tracks no request (progress entries, ingress, cancels)
    resources.continuation_rows  no continuation row holds a snapshot and no waiting request a snapshot
    resources.feedback   no running request counted as needing completion feedback
    resources.rounds     the scheduler holds no outstanding plan and no cohort kept for one
    resources.frames     the executor holds no submitted, uncollected round (`outstanding`, where the
                         executor, or one it wraps as `.executor`, reports it)
    resources.permits    HTTP admission holds no permit (`admission_leaks`, for a served runtime)

The batching runtime (`BatchingRuntime`) is read through `scheduler.residency()`, `requests_held()`
and `executor`; the sequential runtime (`SequentialRuntime`) through `residency()` and the engine's
pages in `metrics()` (capacity and available "pages", where its factory reports them). The engine
allocates no state rows of its own: state rows are partitioned by request slot, so the slots account
for them. A runtime of another kind is not inspected (no divergence).

`drive` (e2e.py) shuts the runtime down before returning; shutdown joins the worker, which first
completes every outstanding round (an ended request's resources return at the fence of its last
round), and clears nothing, so the state inspected is the state the workload left.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conformance.report import CaseResult, Divergence
from helios.engine.scheduler import Residency
from helios.engine.sequential import SequentialResidency, SequentialRuntime
from helios.engine.worker import BatchingRuntime
from helios.server.admission import HttpAdmission


def account(runtime: Any, case: str) -> list[Divergence]:
    """Every resource `runtime` has not returned (see the module docstring); [] when all are back."""
    if isinstance(runtime, BatchingRuntime):
        leaks = scheduler_leaks(runtime.scheduler.residency(), case)
        held = runtime.requests_held()
        if held:
            leaks.append(Divergence(case, "resources.progress", [], list(held),
                                    detail=f"the runtime still tracks {len(held)} request(s)"))
        leaks.extend(frame_leaks(runtime.executor, case))
        return leaks
    if isinstance(runtime, SequentialRuntime):
        return sequential_leaks(runtime.residency(), runtime.metrics(), case)
    return []


def scheduler_leaks(residency: Residency, case: str) -> list[Divergence]:
    """What a batching scheduler's snapshot still holds."""
    leaks = _slot_leaks(residency.slots, residency.free_slots, case)
    pages = residency.pages
    returned = pages.free + pages.cached
    if returned != pages.capacity or residency.referenced_pages:
        held = ", ".join(f"page {p} ({n} reference{'s' if n > 1 else ''})"
                         for p, n in sorted(residency.referenced_pages.items()))
        leaks.append(Divergence(case, "resources.pages", pages.capacity, returned,
                                detail=f"{pages.free} free + {pages.cached} cached of {pages.capacity} pages"
                                       + (f"; still referenced: {held}" if held else "")))
    if residency.requests or residency.pending or residency.readmitting or residency.running:
        leaks.append(Divergence(case, "resources.requests", [], list(residency.requests),
                                detail=f"{residency.pending} pending, {residency.readmitting} readmitting, "
                                       f"{residency.running} running"))
    if residency.continuation_rows or residency.snapshots:
        leaks.append(Divergence(case, "resources.continuation_rows", 0, residency.continuation_rows,
                                detail=f"{residency.continuation_rows} continuation row(s) held, "
                                       f"{residency.snapshots} snapshot(s) of waiting requests"))
    if residency.feedback:
        leaks.append(Divergence(case, "resources.feedback", 0, residency.feedback,
                                detail="requests counted as needing completion feedback (one frame only)"))
    if residency.outstanding or residency.cohorts:
        leaks.append(Divergence(case, "resources.rounds", [], list(residency.outstanding or residency.cohorts),
                                detail=f"{len(residency.outstanding)} outstanding plan(s), "
                                       f"{len(residency.cohorts)} cohort(s) kept"))
    return leaks


def frame_leaks(executor: Any, case: str) -> list[Divergence]:
    """Submitted, uncollected rounds of `executor` and of every executor it wraps (`.executor`)."""
    leaks: list[Divergence] = []
    seen: set[int] = set()
    while executor is not None and id(executor) not in seen:
        seen.add(id(executor))
        outstanding = getattr(executor, "outstanding", None)
        if isinstance(outstanding, int) and outstanding:
            leaks.append(Divergence(case, "resources.frames", 0, outstanding,
                                    detail=f"{type(executor).__name__} holds {outstanding} uncollected round(s)"))
        executor = getattr(executor, "executor", None)
    return leaks


def sequential_leaks(residency: SequentialResidency, metrics: Any, case: str) -> list[Divergence]:
    """What the sequential worker and its engine still hold."""
    leaks = _slot_leaks(residency.slots, residency.free_slots, case)
    capacity, available = metrics.capacity.get("pages"), metrics.available.get("pages")
    if capacity is not None and available is not None and available != capacity:
        leaks.append(Divergence(case, "resources.pages", capacity, available,
                                detail=f"{available} of the engine's {capacity} pages are free"))
    if residency.requests or residency.active or residency.pending:
        leaks.append(Divergence(case, "resources.requests", [], list(residency.requests),
                                detail=f"{residency.pending} pending, {residency.active} active"))
    return leaks


def admission_leaks(admission: HttpAdmission, case: str) -> list[Divergence]:
    """HTTP admission permits still held once every response has been read."""
    if admission.in_use == 0:
        return []
    return [Divergence(case, "resources.permits", 0, admission.in_use,
                       detail=f"{admission.in_use} of {admission.capacity} permits are held")]


def resource_cases(leaks: Sequence[Divergence]) -> list[CaseResult]:
    """One divergence case per leak (a clean run adds no case)."""
    return [CaseResult(leak.case, "divergence", leak) for leak in leaks]


def _slot_leaks(slots: int, free: Sequence[int], case: str) -> list[Divergence]:
    if sorted(free) == list(range(slots)):
        return []
    missing = sorted(set(range(slots)) - set(free))
    repeated = sorted({s for s in free if list(free).count(s) > 1})
    parts = ([f"slot(s) {missing} not returned"] if missing else []) + (
        [f"slot(s) {repeated} listed twice"] if repeated else [])
    return [Divergence(case, "resources.slots", slots, len(free), detail="; ".join(parts) or "unknown slots")]


__all__ = ["account", "admission_leaks", "frame_leaks", "resource_cases", "scheduler_leaks", "sequential_leaks"]
