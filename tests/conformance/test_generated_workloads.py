"""The default workloads are derived from the core's geometry and reach every mechanism the core
supports; the coverage table says so, observed from what ran. Two geometries: 4-token pages with a
sliding window and one EOS id (`conform_core`), 16-token pages, no window, a tool syntax and two EOS
ids (`tool_core`). A narrowed workload is `incomplete`; workload files keep working."""

from __future__ import annotations

import json

import pytest

from conformance import coverage as c
from conformance.generate import Geometry, generated_workloads
from conformance.report import CaseResult, LevelResult, Report
from conformance.runner import ConformOptions, conform
from conformance.workload import InvalidWorkload, load_workloads
from tests.conformance.conftest import DEVICE

WORKLOAD_LEVELS = ("trace", "e2e")


def _generated(core):
    return conform(core, ConformOptions(levels=WORKLOAD_LEVELS, device=DEVICE))


def _assert_every_supported_mechanism_exercised(report: Report, eos_ids) -> None:
    coverage = report.coverage
    assert coverage is not None and coverage.required, report.table()
    assert report.verdict == "pass" and report.exit_code == 0, report.table()
    assert coverage.missing == ()
    names = {row.mechanism for row in coverage.rows}
    assert {c.eos_mechanism(e) for e in eos_ids} <= names
    for row in coverage.rows:
        if not row.supported:
            assert row.note.startswith(c.NOT_SUPPORTED)
            continue
        for level in WORKLOAD_LEVELS:
            expected = c.EXERCISED if c.observable(row.mechanism, level) else c.NOT_OBSERVED
            assert row.states[level] == expected, (row, report.table())


def test_page4_window_core_reaches_every_mechanism(conform_core):
    from tests.conformance.test_conform_passes import Observed
    from tests.conformance.test_tier_conformance import check_tiers_run

    geometry = Geometry.of(conform_core)
    assert geometry.page_tokens == 4 and geometry.window_tokens == 8 and not geometry.tool_syntax
    production = Observed()
    report = conform(conform_core, ConformOptions(levels=WORKLOAD_LEVELS, device=DEVICE, production=production))
    _assert_every_supported_mechanism_exercised(report, geometry.eos_ids)
    check_tiers_run(production.runtimes[-1], production.sinks[-1].records)  # the last workload: tiers
    assert report.coverage.state(c.WINDOW, "trace") == c.EXERCISED
    (tool,) = [row for row in report.coverage.rows if row.mechanism == c.TOOL]
    assert not tool.supported and "no tool syntax" in tool.note
    table = report.table()
    assert "coverage (required):" in table and "not supported by the core (no tool syntax)" in table
    data = json.loads(report.to_json())
    assert data["verdict"] == "pass" and data["coverage"]["missing"] == []
    assert {row["mechanism"] for row in data["coverage"]["rows"]} >= {c.CHUNKED, c.PREEMPTION, c.GRAMMAR}


def test_page16_tool_core_reaches_every_mechanism(tool_core):
    geometry = Geometry.of(tool_core)
    assert geometry.page_tokens == 16 and geometry.window_tokens is None and geometry.tool_syntax
    assert geometry.eos_ids == (256, 258)  # several EOS ids: an EOS check on the first one alone misses 258
    report = _generated(tool_core)
    _assert_every_supported_mechanism_exercised(report, geometry.eos_ids)
    for eos in geometry.eos_ids:
        assert report.coverage.state(c.eos_mechanism(eos), "e2e") == c.EXERCISED
    assert report.coverage.state(c.TOOL, "e2e") == c.EXERCISED
    (window,) = [row for row in report.coverage.rows if row.mechanism == c.WINDOW]
    assert not window.supported and "no sliding window" in window.note


def test_generated_workloads_are_fitted_to_the_geometry(conform_core, tool_core):
    for core in (conform_core, tool_core):
        geometry = Geometry.of(core)
        geometry_workload, pressure, *rest = generated_workloads(core, geometry)
        snapshot = [w for w in rest if w.name == "snapshot"]
        (tiers,) = [w for w in rest if w.name == "tiers"]  # both cores reuse prefixes and restore mid-page
        assert [r.name for r in tiers.requests] == ["turn-1", "turn-2", "long", "filler", "resent", "turn-2-again"]
        assert tiers.requests[1].body["prompt"][:geometry.page_tokens + 1] == tiers.requests[0].body["prompt"]
        assert tiers.requests[4].body == tiers.requests[2].body and tiers.requests[5].body == tiers.requests[1].body
        assert tiers.pages == 3 and tiers.host_pages == 8
        requests = {r.name: r for r in geometry_workload.requests}
        assert len(requests["chunked"].body["prompt"]) > geometry.chunk_tokens
        reuse = requests["reuse"]
        assert reuse.after == "chunked" and not reuse.output_filter
        assert reuse.body["prompt"][: geometry.page_tokens] == requests["chunked"].body["prompt"][: geometry.page_tokens]
        assert {f"eos-{e}" for e in geometry.eos_ids} <= set(requests)
        assert requests["grammar"].chat and "response_format" in requests["grammar"].body
        assert ("tool" in requests) == geometry.tool_syntax
        assert pressure.pages == 2 and len(pressure.requests) == 2
        # both cores prepare RESTORATION graphs; the snapshot workload is kept where its shape restores
        assert geometry.snapshots and [w.name for w in snapshot] in ([], ["snapshot"])
        assert all(w.pages == 5 and len(w.requests) == 2 for w in snapshot)
    assert [w.name for w in generated_workloads(conform_core)][2:] == ["snapshot", "tiers"]  # page 4 restores


def test_a_narrowed_workload_is_incomplete(conform_core):
    geometry_workload = generated_workloads(conform_core)[0]
    narrowed = geometry_workload.with_requests([r for r in geometry_workload.requests if r.name == "chunked"])
    report = conform(conform_core, ConformOptions(levels=WORKLOAD_LEVELS, device=DEVICE,
                                                  extra_workloads=(narrowed,), require_coverage=True))
    assert report.verdict == "incomplete" and report.exit_code == 4, report.table()
    missing = set(report.coverage.missing)
    assert {c.PREEMPTION, c.REUSE, c.TOKEN_STOP, c.GRAMMAR, c.UNFILTERED} <= missing
    assert c.eos_mechanism(Geometry.of(conform_core).eos_ids[0]) in missing
    assert c.CHUNKED not in missing and c.WINDOW not in missing
    assert report.coverage.state(c.PREEMPTION, "trace") == c.NOT_REACHED
    assert "not reached: " in report.table() and json.loads(report.to_json())["verdict"] == "incomplete"
    # given workloads report their coverage without requiring it unless asked
    given = Report(report.levels, type(report.coverage)(report.coverage.levels, report.coverage.rows, required=False))
    assert given.verdict == "pass" and "reported, not required" in given.table()


def test_incomplete_never_hides_a_divergence():
    from conformance.coverage import Coverage, CoverageRow
    from conformance.report import Divergence

    coverage = Coverage(("trace",), (CoverageRow(c.CHUNKED, {"trace": c.NOT_REACHED}),))
    assert Report((LevelResult("trace", (CaseResult("w", "pass"),)),), coverage).verdict == "incomplete"
    diverged = CaseResult("w", "divergence", Divergence("w", "sampled_id", 1, 2))
    report = Report((LevelResult("trace", (diverged,)),), coverage)
    assert report.verdict == "divergence" and report.exit_code == 1


def test_workload_files_carry_chat_bodies_order_and_unfiltered_requests(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"name": "mine", "requests": [
        {"name": "first", "prompt": [1, 2, 3, 4, 5], "max_tokens": 2, "temperature": 0},
        {"name": "second", "prompt": [1, 2, 3, 4, 6], "max_tokens": 2, "temperature": 0, "after": "first",
         "output_filter": False},
        {"name": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0,
         "response_format": {"type": "json_object"}}]}))
    (workload,) = load_workloads(path)
    first, second, chat = workload.requests
    assert second.after == "first" and not second.output_filter and "after" not in second.body
    assert chat.chat and not first.chat
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "bad", "requests": [
        {"name": "a", "prompt": [1], "temperature": 0, "after": "b"}, {"name": "b", "prompt": [2], "temperature": 0}]}))
    with pytest.raises(InvalidWorkload, match="not an earlier request"):
        load_workloads(bad)
    bad.write_text(json.dumps({"name": "bad", "requests": [
        {"name": "a", "prompt": [1], "temperature": 0, "stop": ["x"], "output_filter": False}]}))
    with pytest.raises(InvalidWorkload, match="without an output filter"):
        load_workloads(bad)
    assert {w.name for w in load_workloads()} >= {"mixed", "pressure"}  # the shipped file still loads


def test_help_documents_the_coverage_and_incomplete_exit(capsys):
    from helios.cli import main

    with pytest.raises(SystemExit):
        main(["conform", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "4 incomplete" in text and "--require-coverage" in text and "derived from the core's geometry" in text


@pytest.mark.slow
def test_the_default_workloads_catch_a_preemption_that_leaks_a_page(conform_core, monkeypatch):
    """Failure class 2 (workloads not fitted to the core): a preemption that keeps one reference on
    the victim's first page passed the old default workloads, which never preempted on a core with
    this geometry; the generated `pressure` workload preempts, and the leak is named: with two pages
    and one of them lost, the preempted request can never be readmitted, so production times out
    there and resource accounting names the page. (The workloads are generated first: their learning
    passes must not run the bug.)"""
    from helios.engine.page_cache import PageCache
    from helios.engine.residency import RequestResidency

    workloads = generated_workloads(conform_core)
    preempting: list[bool] = []
    preempt, release = RequestResidency._preempt, PageCache.release

    def flagged(self, s, row=None):
        preempting.append(True)
        try:
            preempt(self, s, row)
        finally:
            preempting.pop()

    def leaky(self, pages):  # the bug: a preempted request's first page keeps its reference
        release(self, pages[1:] if preempting and pages else pages)

    monkeypatch.setattr(RequestResidency, "_preempt", flagged)
    monkeypatch.setattr(PageCache, "release", leaky)
    report = conform(conform_core, ConformOptions(levels=WORKLOAD_LEVELS, device=DEVICE, extra_workloads=workloads,
                                                  timeout_s=20))
    leaks = [d for d in report.level("trace").divergences if d.field == "resources.pages"]
    assert leaks and leaks[0].case == "pressure/resources/production", report.table()
    assert report.exit_code == 1
