"""The latent family (dense DeepSeek-V3) through the production executor on CPU (fp32, Triton kernels
interpreted, two rounds in flight) under the batching scheduler: one request's logits of every
sampling round equal transformers' within 1e-4 relative and its 32 greedy tokens are equal, beside
other requests in batched prefill, decode and mixed rounds whose tokens equal transformers' too.
(Snapshots, page pressure and prefix reuse through the production executor are compared with the
reference by `helios conform`: tests/conformance/test_latent_conformance.py.)"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from helios.ignition.prepare import prepare_checkpoint
from helios.runtime.request import GenerationRequest
from tests.recurrent.helpers import GREEDY, OPTIONS, PROMPT, PROMPTS, C, drive
from tests.recurrent.test_production_recurrent import _logits_of, production_runtime

pytestmark = pytest.mark.slow
FAMILY = "deepseek_v3"
# fewer graphs than the reference tests' core (the interpreter lowers each): batches of 1 and 2, chunks
# of 8 (the 20-token prompt is prefilled in three rounds), no scored prefill or snapshots
PRODUCTION = replace(OPTIONS, batch_capacities=(1, 2), prefill_capacities=(8,), prompt_score_top=0,
                     snapshot_capacity=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="an fp32 CPU test (interpreted kernels, device=\"cpu\"); "
                    "a GPU process defines compiled kernels, and conformance checks the operator on a GPU")
def test_production_logits_and_greedy_tokens_match_transformers_in_batched_mixed_rounds(tiny_checkpoint, hf_model):
    from tests.fixtures.hf_oracle import hf_greedy, hf_teacher_forced_logits

    core = prepare_checkpoint(tiny_checkpoint(FAMILY), PRODUCTION)
    model = hf_model(FAMILY)
    runtime = production_runtime(core, pages=32, max_active=2)
    rows: list[np.ndarray] = []
    operations: list[int] = []

    def observe(plan) -> None:
        operations.append(plan.operation)
        rows.extend(row for request_id, row in _logits_of(runtime, plan).items() if request_id == "r")

    requests = {"r": GenerationRequest(PROMPT, max_tokens=32, sampling=GREEDY, ignore_eos=True)}
    requests.update({f"r{i}": GenerationRequest(p, max_tokens=4, sampling=GREEDY, ignore_eos=True)
                     for i, p in enumerate(PROMPTS[1:3])})
    tokens, _ = drive(runtime, requests, {}, lambda plane, row: None, [], on_submit=observe)
    for request_id, request in requests.items():
        expected = hf_greedy(model, list(request.prompt_token_ids), request.max_tokens)
        assert tokens[request_id] == expected, request_id
    ours = np.stack(rows[:17])  # the prompt's last chunk + 16 decode steps
    reference = hf_teacher_forced_logits(model, list(PROMPT), tokens["r"][:16])
    relative = np.abs(ours - reference).max() / np.abs(reference).max()
    assert relative < 1e-4, f"largest relative logit error {relative:.3g}"
    assert {C.OPERATION_PREFILL, C.OPERATION_DECODE, C.OPERATION_MIXED} <= set(operations), operations
