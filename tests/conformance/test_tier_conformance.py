"""`helios conform` over the storage tiers past the device's published pages: the generated `tiers`
workload (a second turn restoring the first turn's partial last page from its published continuation
row; a re-sent prompt readmitting its evicted checkpoints from the host tier; the first turn's
continuation, evicted from its row, readmitted from the host tier) passes the trace audit and the
end-to-end comparison with both coverage rows exercised at both levels (run with every generated
workload by test_generated_workloads.py, which checks it with `check_tiers_run`), and a readmission
copying another host page than the one its checkpoint was offloaded to is caught at the trace level,
naming the page, the host page and the plane."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conformance.generate import TIER_HOST_PAGES, TIER_PAGES, Geometry, _Draws, _tiers
from tests.conformance.helpers import only_divergence, run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiers_workload(conform_core):
    geometry = Geometry.of(conform_core)
    workload = _tiers(conform_core, geometry, _Draws(conform_core), midpage=True, host=True)
    assert workload is not None, "the tiers workload reaches neither a mid-page hit nor a host readmission"
    return workload


def check_tiers_run(runtime, records) -> None:
    """What production's run of the `tiers` workload did (its runtime and trace records)."""
    counters, tier = runtime.scheduler.counters, runtime.scheduler.cache.host
    assert counters.recomputed_tokens == 0
    assert tier.pages == TIER_HOST_PAGES and tier.readmitted >= 2  # resent's two checkpoints, turn-2-again's
    readmitting = [r for r in records if any(copy.readmit for copy in r.copies)]
    assert readmitting and all(any(key.startswith("readmit.") for key in r.state) for r in readmitting)
    # later publications took turn-1's row: its continuation moved to the host tier (the audit copied it
    # too), and turn-2-again's hit copied it from there into its page (audited as readmit.<plane>)
    assert counters.continuations_offloaded >= 1 and any(copy.continuation for r in records for copy in r.copies)
    assert counters.continuation_hits == 2 and counters.continuations_readmitted == 1


def test_the_tiers_workload_is_fitted(tiers_workload):
    assert [r.name for r in tiers_workload.requests] == ["turn-1", "turn-2", "long", "filler", "resent",
                                                         "turn-2-again"]
    assert (tiers_workload.pages, tiers_workload.host_pages) == (TIER_PAGES, TIER_HOST_PAGES)


def test_a_readmission_from_another_host_page_is_caught_and_named(conform_core, tiers_workload, monkeypatch):
    """The mutated executor readmits every checkpoint from the host page after the one its copy names
    (a stale slot of the tier): the readmitted page is compared before anything reads it."""
    from helios.production.executor import NativeExecutor
    from helios.runtime.rounds import PageCopy

    copy_pages = NativeExecutor._copy_pages

    def one_host_page_off(self, plan, gpu):
        shifted = tuple(PageCopy(True, copy.page, (copy.host_page + 1) % self.host_pages) if copy.readmit else copy
                        for copy in plan.page_copies)
        copy_pages(self, replace(plan, page_copies=shifted), gpu)

    monkeypatch.setattr(NativeExecutor, "_copy_pages", one_host_page_off)
    report = run(conform_core, ("trace",), tiers_workload)
    found = only_divergence(report, "trace")
    assert found.case == "tiers" and found.field.startswith("readmit."), report.table()
    assert "readmitted from host page" in found.detail and "offloaded there" in found.detail
