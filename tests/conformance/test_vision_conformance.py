"""`helios conform` passes on the tiny LLaVA core: the vision operators (activation and
bidirectional_attention) at the operators level, and the generated `images` workload (chat requests
with PNG images beside a text request: a second image after the first, then the first again) traced
and compared end to end with zero divergences. Production reused the pages of the repeated image's span, never the other
image's: page keys hold each image's digest."""

from __future__ import annotations

from conformance.report import LEVELS
from conformance.runner import ConformOptions, conform
from tests.conformance.conftest import DEVICE
from tests.conformance.test_conform_passes import Observed


def test_conform_passes_on_a_vision_core(llava_core):
    _, core = llava_core
    production = Observed()
    report = conform(core, ConformOptions(levels=LEVELS, device=DEVICE, workload_names=("images",),
                                          operators=("activation", "bidirectional_attention"),
                                          production=production, require_coverage=False))
    assert report.verdict == "pass", report.table()
    assert report.level("trace").passed == 1
    assert report.level("e2e").passed == 4
    assert {case.case.split("/")[0] for case in report.level("operators").cases} == {
        "activation", "bidirectional_attention"}
    (runtime,), (sink,) = production.runtimes, production.sinks
    # image B's request encoded its own image (the pages of A's span were not B's), the repeated A
    # encoded none: its image's pages were reused (an image span is a reused prefix's content)
    encoded = [lane for record in sink.records for lane in record.lanes if lane.image is not None]
    assert len(encoded) == 2
    assert any(len(record.lanes) > 1 and any(lane.image_context for lane in record.lanes)
               for record in sink.records)  # the image request's rounds ran batched beside the text one
    assert runtime.scheduler.counters.reused_tokens > core.contract.model.vision.features_per_window
