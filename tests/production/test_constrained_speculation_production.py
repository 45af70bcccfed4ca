"""A grammar-constrained request under speculation in the production runtime (fp32, Triton
interpreted, CPU): with history drafting, the json_schema request of tests/engine/constrained_cases.py
gives, greedy, exactly the tokens the reference runtime gives without speculation; its SPECULATIVE
rounds verify copied proposals under their per-position masks (`speculative_grammar_mask`)."""

from __future__ import annotations

import pytest

from helios.reference.engine import ReferenceEngine
from helios.runtime.events import Finished
from helios.runtime.limits import AdmissionLimits
from helios.runtime.options import RuntimeOptions
from tests.engine.constrained_cases import constrained_core, document, prepared, preparer, tool_checkpoint
from tests.production.helpers import CPU_FP32
from tests.runtime.streams import serve_all

pytestmark = [pytest.mark.slow, CPU_FP32]


def test_a_constrained_request_speculates_losslessly_in_production(tiny_checkpoint, tiny_draft, tmp_path_factory):
    from helios.production.loading import load_native_model, runtime_for

    checkpoint = tool_checkpoint(tiny_checkpoint("qwen3"), tmp_path_factory.mktemp("tools") / "tiny-qwen3-tools")
    # one lane and one prefill capacity: every captured graph is lowered at load, interpreted kernels are slow
    core = constrained_core(checkpoint, tiny_draft("qwen3", "small"), batch_capacities=(1,), prefill_capacities=(64,))
    frontend = preparer(core)
    request = prepared(frontend, "json").runtime_request
    grammar = prepared(frontend, "json", "plain").runtime_request.grammar  # a grammar state of its own
    expected = []
    for token in ReferenceEngine.load(core).generate(request.generation, grammar=grammar):  # plain decoding
        expected.append(token)
        grammar.advance(token)  # as the worker does before the next round
    model = load_native_model(core, device="cpu", pages=32, speculative_width=4, history_drafting=True)
    runtime = runtime_for(model, RuntimeOptions(AdmissionLimits(max_active=1, queue_capacity=2), speculative_width=4,
                                                history_drafting=True))
    ((tokens, terminal),) = serve_all(runtime, [request])
    assert tokens == expected, document(frontend, tokens)
    assert isinstance(terminal, Finished)
    counters = runtime.scheduler.counters
    assert counters.speculative_rounds >= 1 and 0 < counters.copied_accepted <= counters.copied_offered
