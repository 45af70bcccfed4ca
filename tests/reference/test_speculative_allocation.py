"""`speculative_allocate` against the brute-force oracle (`allocation_oracle`): thousands of random
confidence sets of few distinct values (exact ties everywhere), ceilings and P both binding."""

from __future__ import annotations

import numpy as np

from helios.reference import speculative as spec
from tests.reference.allocation_oracle import allocation_oracle, quantized_confidences


def test_the_reference_allocates_what_the_oracle_enumerates():
    rng = np.random.default_rng()
    binding = {"ceiling": 0, "packed": 0, "ties": 0}
    for _ in range(3000):
        lanes, drafts = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        confidence = quantized_confidences(rng, lanes, drafts)
        ceilings = rng.integers(0, drafts + 3, size=lanes).astype(np.int32)
        lane_order = rng.permutation(lanes + 2)[:lanes].astype(np.int32)
        lane_order[rng.random(lanes) < 0.15] = -1
        live = (lane_order >= 0) & (ceilings >= 1)
        packed = max(lanes, int(rng.integers(int(live.sum()), int(live.sum()) * (drafts + 1) + 2)))
        expected = allocation_oracle(confidence, ceilings, lane_order, packed)
        np.testing.assert_array_equal(spec.speculative_allocate(confidence, ceilings, lane_order,
                                                                packed_tokens=packed), expected)
        limits = np.where(live, np.minimum(ceilings, drafts + 1), 0)
        binding["ceiling"] += bool(((expected == limits) & (limits < drafts + 1) & live).any())
        binding["packed"] += bool(expected.sum() == packed and (expected < limits).any())
        binding["ties"] += len(set(confidence[live].ravel().tolist())) < confidence[live].size
    assert min(binding.values()) > 100, binding


def test_the_oracle_reads_the_rule_on_a_worked_example():
    # lane 0 (slot 1): survivals 0.5, 0.25; lane 1 (slot 0): 0.5, 0.5 * 0.5 = 0.25; lane 2 (slot 2): 1, 0
    confidence = np.array([[0.5, 0.5], [0.5, 0.5], [1.0, 0.0]], np.float32)
    lane_order = np.array([1, 0, 2], np.int32)
    ceilings = np.full(3, 3, np.int32)
    # 3 pending rows; then 1.0 (lane 2), then the 0.5 ties by slot: lane 1, lane 0; then the 0.25 ties
    # by slot again (lane 1, lane 0), then lane 2's 0.0
    for packed, expected in ((4, [1, 1, 2]), (5, [1, 2, 2]), (6, [2, 2, 2]), (7, [2, 3, 2]), (8, [3, 3, 2]),
                             (9, [3, 3, 3])):
        np.testing.assert_array_equal(allocation_oracle(confidence, ceilings, lane_order, packed), expected)
        np.testing.assert_array_equal(spec.speculative_allocate(confidence, ceilings, lane_order,
                                                                packed_tokens=packed), expected)
