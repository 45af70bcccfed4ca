"""GPU only: sampled speculation is lossless over whole requests in the production runtime (fp32
core, CUDA graphs, compiled Triton kernels): the test of
tests/reference/test_speculative_sampled_requests.py, 20,000 seeded requests whose first four tokens
follow plain decoding's exact distribution (chi-square, p > 0.001), and the verification kernel
mutated to accept with min(1, q / p) fails it. On a CPU the interpreted kernels run one lane-round in
about a second, so 20,000 requests would take many hours: there the reference runtime's test and the
kernels' bit-for-bit agreement with the reference (test_kernels_speculative.py) stand in."""

from __future__ import annotations

import pytest
import torch

from helios.runtime.limits import AdmissionLimits
from helios.runtime.options import RuntimeOptions
from tests.production.helpers import mutant_module
from tests.reference import sampled_requests as sampled

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
ACCEPTANCE = "accept_sampled = (p_x >= q_x) | (word * q_x < (p_x << 32))"
INVERTED = "accept_sampled = (q_x >= p_x) | (word * p_x < (q_x << 32))"  # min(1, q / p)


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    return sampled.setting(tmp_path_factory.mktemp("sampled-pair"))


def _speculative_tokens(core):
    """The first tokens of the 20,000 requests through the production runtime (speculative width 4)."""
    from helios.production.loading import load_native_model, runtime_for

    model = load_native_model(core, device="cuda", pages=sampled.PAGES, speculative_width=sampled.WIDTH)
    runtime = runtime_for(model, RuntimeOptions(AdmissionLimits(max_active=sampled.LANES,
                                                                queue_capacity=sampled.SAMPLES),
                                                speculative_width=sampled.WIDTH))
    return sampled.first_tokens(runtime), runtime.scheduler.counters


def test_the_first_four_tokens_follow_plain_decodings_distribution(setting):
    core, exact = setting
    tokens, counters = _speculative_tokens(core)
    fit = sampled.goodness_of_fit(tokens, exact)
    assert fit.p_value > sampled.SIGNIFICANCE, str(fit)
    assert counters.speculative_rounds >= sampled.SAMPLES // sampled.LANES
    assert 0.3 < counters.accepted_drafts / counters.offered_drafts < 0.9, (counters.accepted_drafts,
                                                                          counters.offered_drafts)


def test_a_wrong_acceptance_rule_fails_the_same_test(setting, monkeypatch, tmp_path):
    from helios.production.kernels import speculative

    mutant = mutant_module(speculative, ACCEPTANCE, INVERTED, tmp_path)
    monkeypatch.setattr(speculative, "_verify_kernel", mutant._verify_kernel)
    core, exact = setting
    tokens, counters = _speculative_tokens(core)
    fit = sampled.goodness_of_fit(tokens, exact)
    assert fit.p_value < sampled.SIGNIFICANCE, str(fit)
    assert counters.speculative_rounds >= sampled.SAMPLES // sampled.LANES
