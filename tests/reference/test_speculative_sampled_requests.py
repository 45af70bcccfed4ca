"""Sampled speculation is lossless over whole requests in the reference runtime (the batching engine
over the reference executor, NumPy): 20,000 seeded requests on a core of 8 ids, each through a
MIXED round (its prompt and first token) and then SPECULATIVE rounds of width 4, 512 lanes a round,
give first four tokens distributed as plain decoding gives them: a chi-square goodness of fit
against the exact distribution from the target's logits, p > 0.001. The same test rejects a wrong
acceptance rule (test_speculative_sampled_wrong_rule.py). Statistics and the core:
tests/reference/sampled_requests.py."""

from __future__ import annotations

import pytest

from tests.reference import sampled_requests as sampled

pytestmark = pytest.mark.slow


def test_the_first_four_tokens_follow_plain_decodings_distribution(tmp_path):
    core, exact = sampled.setting(tmp_path)
    runtime = sampled.reference_runtime(core)
    fit = sampled.goodness_of_fit(sampled.first_tokens(runtime), exact)
    assert fit.p_value > sampled.SIGNIFICANCE, str(fit)
    # every token after the first came from SPECULATIVE rounds, with accepted runs and rejections
    # both frequent
    counters = runtime.scheduler.counters
    assert counters.speculative_rounds >= sampled.SAMPLES // sampled.LANES
    assert 0.3 < counters.accepted_drafts / counters.offered_drafts < 0.9, (counters.accepted_drafts,
                                                                          counters.offered_drafts)
