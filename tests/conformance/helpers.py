"""Shared helpers of the conformance tests: small workloads built in code, and running levels."""

from __future__ import annotations

from conformance.report import Report
from conformance.runner import ConformOptions, conform
from conformance.workload import Workload, WorkloadRequest
from tests.conformance.conftest import DEVICE


def workload(name: str, *bodies: dict, max_active: int = 2, pages: int | None = None) -> Workload:
    requests = tuple(WorkloadRequest(body.get("name", f"r{i}"), {k: v for k, v in body.items() if k != "name"})
                     for i, body in enumerate(bodies))
    return Workload(name, requests, max_active=max_active, queue_capacity=8, pages=pages)


def run(core, levels: tuple[str, ...], *workloads: Workload, operators: tuple[str, ...] = (),
        production=None) -> Report:
    return conform(core, ConformOptions(levels=levels, device=DEVICE, extra_workloads=tuple(workloads),
                                        operators=operators, production=production))


def only_divergence(report: Report, level: str):
    divergences = report.level(level).divergences
    assert divergences, report.table()
    return divergences[0]
