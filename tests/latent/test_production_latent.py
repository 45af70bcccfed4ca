"""The latent family (dense DeepSeek-V3) through the production executor on CPU (fp32, Triton kernels
interpreted, two rounds in flight) under the batching scheduler: the logits of every sampling round
equal transformers' within 1e-4 relative and 32 greedy tokens are equal; batched requests in prefill,
decode and mixed rounds give each request transformers' tokens. (Snapshots, page pressure and prefix
reuse through the production executor are compared with the reference by `helios conform`:
tests/conformance/test_latent_conformance.py.)"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from helios.ignition.prepare import prepare_checkpoint
from helios.runtime.request import GenerationRequest
from tests.recurrent.helpers import GREEDY, OPTIONS, PROMPT, PROMPTS, C, drive
from tests.recurrent.test_production_recurrent import _logits_of, production_runtime

pytestmark = pytest.mark.slow
FAMILY = "deepseek_v3"
# fewer graphs than the reference tests' core (the interpreter lowers each): batches of 1 and 2, chunks
# of 8 (the 20-token prompt is prefilled in three rounds)
PRODUCTION = replace(OPTIONS, batch_capacities=(1, 2), prefill_capacities=(8,), prompt_score_top=0,
                     snapshot_capacity=0)


@pytest.fixture(scope="module")
def core(tiny_checkpoint):
    return prepare_checkpoint(tiny_checkpoint(FAMILY), PRODUCTION)


def test_production_logits_and_greedy_tokens_match_transformers(core, hf_model):
    from tests.fixtures.hf_oracle import hf_greedy, hf_teacher_forced_logits

    runtime = production_runtime(core, pages=32, max_active=2)
    rows: list[np.ndarray] = []
    request = GenerationRequest(PROMPT, max_tokens=32, sampling=GREEDY, ignore_eos=True)
    tokens, _ = drive(runtime, {"r": request}, {}, lambda plane, row: None, [],
                      on_submit=lambda plan: rows.extend(_logits_of(runtime, plan).values()))
    assert tokens["r"] == hf_greedy(hf_model(FAMILY), list(PROMPT), 32)
    ours = np.stack(rows[:17])  # the prompt's last chunk + 16 decode steps
    reference = hf_teacher_forced_logits(hf_model(FAMILY), list(PROMPT), tokens["r"][:16])
    relative = np.abs(ours - reference).max() / np.abs(reference).max()
    assert relative < 1e-4, f"largest relative logit error {relative:.3g}"


def test_production_batched_prefill_decode_and_mixed_rounds_give_transformers_tokens(core, hf_model):
    from tests.fixtures.hf_oracle import hf_greedy

    runtime = production_runtime(core, pages=32, max_active=2)
    operations: list[int] = []
    requests = {f"r{i}": GenerationRequest(p, max_tokens=6, sampling=GREEDY, ignore_eos=True)
                for i, p in enumerate(PROMPTS[1:])}
    tokens, _ = drive(runtime, requests, {}, lambda plane, row: None, [],
                      on_submit=lambda plan: operations.append(plan.operation))
    for request_id, request in requests.items():
        assert tokens[request_id] == hf_greedy(hf_model(FAMILY), list(request.prompt_token_ids), 6), request_id
    assert {C.OPERATION_PREFILL, C.OPERATION_DECODE, C.OPERATION_MIXED} <= set(operations), operations
