"""GPU only: the speculative kernels capture into one CUDA graph (static buffers, no host
synchronisation) and every replay over fresh inputs copied into the captured tensors equals the
reference: verification, token probabilities, allocation, packing and commit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helios.production.kernels import speculative
from helios.reference import speculative as spec
from tests.production.helpers import numpy
from tests.production.test_kernels_speculative import sampling_lanes, verify_round
from tests.reference.allocation_oracle import quantized_confidences

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
LANES, DRAFTS, VOCAB = 12, 3, 5000  # two vocabulary blocks of 4096 ids
PACKED = LANES * (DRAFTS + 1) + 1


def _round(rng: np.random.Generator) -> dict[str, np.ndarray]:
    names = ("logits", "draft_logits", "candidates", "lengths", "consumed", "seed", "parameters", "histogram",
             "mask")
    values = dict(zip(names, verify_round(rng, lanes=LANES, drafts=DRAFTS, vocab=VOCAB, packed=PACKED),
                      strict=True))
    values["ids"] = values["candidates"][:, 1].copy()
    values["confidence"] = quantized_confidences(rng, LANES, DRAFTS)
    values["ceilings"] = rng.integers(0, DRAFTS + 3, size=LANES).astype(np.int32)
    values["lane_order"] = rng.permutation(LANES).astype(np.int32)
    values["probability_parameters"] = sampling_lanes(rng, LANES, VOCAB, empty_mask=False)[0]
    return values


def test_the_speculative_kernels_capture_into_one_graph_and_replay_as_the_reference():
    rng = np.random.default_rng()
    first = _round(rng)
    static = {k: torch.from_numpy(np.ascontiguousarray(v)).cuda() for k, v in first.items()}
    i32 = dict(dtype=torch.int32, device="cuda")
    out = {"verified": torch.empty((LANES, DRAFTS + 1), **i32), "accepted": torch.empty(LANES, **i32),
           "probability": torch.empty(LANES, dtype=torch.float32, device="cuda"),
           "allocated": torch.empty(LANES, **i32), "packed": [torch.empty(PACKED, **i32) for _ in range(4)],
           "committed": [torch.empty(LANES, **i32) for _ in range(3)]}
    verifier = speculative.Verifier(PACKED, LANES, DRAFTS, VOCAB, first["histogram"].shape[1], first["mask"].shape[1],
                                    "cuda")
    scorer = speculative.ProbabilityScorer(LANES, VOCAB, "cuda")
    allocator = speculative.Allocator(PACKED, "cuda")
    t = static

    def step() -> None:
        verifier(t["logits"], t["draft_logits"], t["candidates"], t["lengths"], t["consumed"], t["seed"],
                 t["parameters"], t["histogram"], t["mask"], out["verified"], out["accepted"])
        scorer(t["logits"][:LANES], t["ids"], t["probability_parameters"], t["histogram"], t["mask"],
               out["probability"])
        allocator(t["confidence"], t["ceilings"], t["lane_order"], out["allocated"])
        speculative.speculative_pack(t["lane_order"], out["allocated"], t["consumed"], t["candidates"], *out["packed"])
        speculative.speculative_commit(out["verified"], out["accepted"], t["lengths"], t["consumed"],
                                       *out["committed"])

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # compiles every kernel outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for values in [first] + [_round(rng) for _ in range(3)]:
        for k, v in values.items():
            static[k].copy_(torch.from_numpy(np.ascontiguousarray(v)))
        graph.replay()
        torch.cuda.synchronize()
        v = values
        ids, accepted = spec.speculative_verify(v["logits"], v["draft_logits"], v["candidates"], v["lengths"],
                                                v["consumed"], v["seed"], v["parameters"], v["histogram"], v["mask"],
                                                verify_tokens=DRAFTS + 1)
        np.testing.assert_array_equal(numpy(out["verified"]), ids)
        np.testing.assert_array_equal(numpy(out["accepted"]), accepted)
        # NOTE: the GPU's exp may move a fixed-point weight by one unit (docs/sampling.md), which
        # moves a probability by far less than this tolerance
        probability = spec.token_probability(v["logits"][:LANES], v["ids"], v["probability_parameters"],
                                             v["histogram"], v["mask"])
        np.testing.assert_allclose(numpy(out["probability"]), probability, rtol=1e-4, atol=1e-7)
        lengths = spec.speculative_allocate(v["confidence"], v["ceilings"], v["lane_order"], packed_tokens=PACKED)
        np.testing.assert_array_equal(numpy(out["allocated"]), lengths)
        packed = spec.speculative_pack(v["lane_order"], lengths, v["consumed"], v["candidates"], packed_tokens=PACKED)
        for produced, expected in zip(out["packed"], packed, strict=True):
            np.testing.assert_array_equal(numpy(produced), expected)
        for produced, expected in zip(out["committed"], spec.speculative_commit(ids, accepted, v["lengths"],
                                                                                v["consumed"]), strict=True):
            np.testing.assert_array_equal(numpy(produced), expected)
