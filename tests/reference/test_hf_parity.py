"""HF transformers agrees with every logit of the reference engine, for each Llama-family variant.

Tiny random fp32 checkpoints (tests/fixtures/checkpoints.py) are prepared in memory and run by the
reference engine. The prompt (20 tokens) is split into prefill chunks of 16 and 4 (capacities 8 and
16), pages hold 4 tokens, and Mistral's window of 8 tokens is crossed, so chunking, paging and the
window all take part.
"""

from __future__ import annotations

import numpy as np
import pytest

from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.reference.engine import ReferenceEngine
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.fixtures.checkpoints import FAMILIES
from tests.fixtures.hf_oracle import hf_greedy, hf_teacher_forced_logits

PROMPT = (5, 17, 99, 200, 33, 1, 2, 3, 4, 5, 6, 7, 81, 82, 83, 120, 121, 9, 250, 44)
OPTIONS = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1, 2, 4), prefill_capacities=(8, 16))


def _greedy(engine: ReferenceEngine, steps: int) -> list[int]:
    request = GenerationRequest(PROMPT, max_tokens=steps, sampling=SamplingParams(temperature=0.0), ignore_eos=True)
    return list(engine.generate(request))


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_and_greedy_tokens_match_transformers(family, tiny_checkpoint, hf_model):
    engine = ReferenceEngine.load(prepare_checkpoint(tiny_checkpoint(family), OPTIONS), keep=("logits",))
    tokens = _greedy(engine, 32)
    assert tokens == hf_greedy(hf_model(family), list(PROMPT), 32)
    # One kept logits array per round; rounds that sample are the last prefill chunk and each decode.
    assert engine.kept_graphs[:3] == ["initialization", "prefill_p16", "prefill_p8"], engine.kept_graphs
    ours = np.stack([kept["logits"][0] for kept in engine.kept[2:19]])  # the prompt + 16 decode steps
    reference = hf_teacher_forced_logits(hf_model(family), list(PROMPT), tokens[:16])
    assert ours.shape == reference.shape == (17, reference.shape[1])
    relative = np.abs(ours - reference).max() / np.abs(reference).max()
    assert relative < 1e-4, f"{family}: largest relative logit error {relative:.3g}"


@pytest.mark.parametrize(("family", "rope"), [
    ("qwen2", {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 16}),
    ("llama", {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}),
])
def test_rope_scalings_match_transformers(family, rope, tmp_path):
    from tests.fixtures.checkpoints import make_checkpoint
    from tests.fixtures.hf_oracle import load_hf_model

    directory = make_checkpoint(family, tmp_path / family, rope_parameters=rope)
    engine = ReferenceEngine.load(prepare_checkpoint(directory, OPTIONS), keep=("logits",))
    tokens = _greedy(engine, 9)
    ours = np.stack([kept["logits"][0] for kept in engine.kept[2:]])
    model = load_hf_model(directory)
    reference = hf_teacher_forced_logits(model, list(PROMPT), tokens[:8])
    relative = np.abs(ours - reference).max() / np.abs(reference).max()
    assert relative < 1e-4, f"{family} {rope['rope_type']}: largest relative logit error {relative:.3g}"
    assert tokens == hf_greedy(model, list(PROMPT), 9)
