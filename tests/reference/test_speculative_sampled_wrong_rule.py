"""The whole-request losslessness test of test_speculative_sampled_requests.py rejects a
deliberately wrong acceptance rule: with the reference's verification accepting a proposal with
probability min(1, q / p) instead of min(1, p / q), the first four tokens fail the same chi-square
test (p < 0.001, printed on failure) already over the first 5,000 of its seeded requests: a quarter
of the lossless test's sample (chi-square 16,235 on 1,682 dof at 20,000), so the test's power is
shown with margin at a quarter of the suite time."""

from __future__ import annotations

import pytest

from helios.reference import speculative as spec
from tests.reference import sampled_requests as sampled
from tests.reference.speculative_rounds import inverted_acceptance

pytestmark = pytest.mark.slow
WRONG_RULE_SAMPLES = 5_000


def test_a_wrong_acceptance_rule_fails_the_same_test(tmp_path, monkeypatch):
    core, exact = sampled.setting(tmp_path)
    monkeypatch.setattr(spec, "accepts", inverted_acceptance)
    runtime = sampled.reference_runtime(core)
    fit = sampled.goodness_of_fit(sampled.first_tokens(runtime, count=WRONG_RULE_SAMPLES), exact)
    assert fit.p_value < sampled.SIGNIFICANCE, str(fit)
    assert runtime.scheduler.counters.speculative_rounds >= WRONG_RULE_SAMPLES // sampled.LANES
