"""The Engram host gatherer (helios/runtime/engram.py, docs/engram.md), host only: the hash rule
against a plain-integer computation of the documented formula, the rows the operator then reads, and
the two staging frames: a frame held by a round that some rank has not retired is never written, a
third round is refused rather than staged, and the staging never grows."""

from __future__ import annotations

import numpy as np
import pytest

from helios.proto import contract_pb2
from helios.reference.engram import engram_gather
from helios.runtime.engram import EngramFrameBusy, EngramGatherer, EngramHash, EngramHistoryMissing
from helios.runtime.lanes import LaneInput
from helios.runtime.request import SamplingParams

ROWS, WIDTH, ORDERS = 97, 4, (1, 3)
MULTIPLIERS = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xFFFFFFFFFFFFFFC5)


def _table() -> contract_pb2.EngramTable:
    return contract_pb2.EngramTable(name="t", resource="engram/t", rows=ROWS, width=WIDTH, orders=list(ORDERS),
                                    multipliers=list(MULTIPLIERS), staging="s", row_index="i", graphs=["g"])


def _expected_row(sequence: list[int], p: int, k: int) -> int:
    """The docs' formula in Python integers: XOR of (x + 1) * m mod 2**64 over the n-gram ending at p."""
    n = ORDERS[k]
    if p - n + 1 < 0:
        return -1
    ms = MULTIPLIERS[sum(ORDERS[:k]):sum(ORDERS[:k]) + n]
    h = 0
    for j, m in enumerate(ms):
        h ^= ((sequence[p - n + 1 + j] + 1) * m) % 2**64
    return h % ROWS


def _lane(slot: int, consumed: int, tokens: tuple[int, ...], sequence: list[int]) -> LaneInput:
    return LaneInput(slot=slot, generation=1, consumed=consumed, tokens=tokens, prompt_tokens_in_round=len(tokens),
                     samples=False, page_ids=(slot,), seed=0, sampling=SamplingParams(temperature=0.0), output_limit=4,
                     eos_ids=(), history=tuple(sequence[max(0, consumed - 2):consumed]))


def test_the_hash_rule_is_the_documented_formula():
    rule = EngramHash.of(_table())
    sequence = [5, 0, 17, 2**31 - 1, 3, 3, 3, 250]
    for consumed in (0, 1, 2, 5):
        tokens = sequence[consumed:]
        rows = rule.lane_rows(sequence[max(0, consumed - 2):consumed], tokens, consumed)
        for i in range(len(tokens)):
            assert rows[i].tolist() == [_expected_row(sequence, consumed + i, k) for k in range(len(ORDERS))]
    assert rule.lane_rows([], [9], 0)[0, 1] == -1  # a trigram at position 0 starts before the sequence
    with pytest.raises(EngramHistoryMissing, match="carries 1 history tokens; order 3 n-grams need 2"):
        rule.lane_rows([4], [9], 5)
    with pytest.raises(EngramHistoryMissing, match="not known on the host"):
        rule.lane_rows([4, 5], [-1], 5)  # a device-owned pending token still in flight


def test_two_frames_a_held_frame_is_never_overwritten_and_the_staging_never_grows():
    values = np.arange(ROWS * WIDTH, dtype=np.float32).reshape(ROWS, WIDTH)
    packed = 6
    staging = np.zeros((2, packed * len(ORDERS), WIDTH), np.float32)
    row_index = np.zeros((packed, len(ORDERS)), np.int32)
    gatherer = EngramGatherer(_table(), values, staging, row_index, ranks=2)
    a, b, c = [3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8]
    first = [_lane(0, 2, tuple(a[2:]), a)]  # a lane past its first two tokens: they are its history
    assert gatherer.fill(1, first) == 0
    # what the operator reads back is each token's table rows (zeros for no n-gram)
    out = engram_gather(staging, row_index, packed_tokens=3)
    for i in range(3):
        for k in range(len(ORDERS)):
            row = _expected_row(a, 2 + i, k)
            assert np.array_equal(out[i, k * WIDTH:(k + 1) * WIDTH], values[row] if row >= 0 else 0)
    assert gatherer.fill(2, [_lane(1, 0, tuple(b), b)]) == 1
    assert gatherer.held() == (1, 2)
    held_bytes = staging.tobytes()
    with pytest.raises(EngramFrameBusy, match="both staging frames are held"):
        gatherer.fill(3, [_lane(0, 0, tuple(c), c)])
    assert staging.tobytes() == held_bytes  # refused before a byte was written
    gatherer.retire(1, rank=0)  # one rank retired round 1, the other still reads frame 0
    with pytest.raises(EngramFrameBusy):
        gatherer.fill(3, [_lane(0, 0, tuple(c), c)])
    assert staging.tobytes() == held_bytes
    gatherer.retire(1, rank=1)
    frame_one = staging[1].copy()
    assert gatherer.fill(3, [_lane(0, 0, tuple(c), c)]) == 0  # the retired frame, never round 2's
    assert np.array_equal(staging[1], frame_one) and gatherer.held() == (3, 2)
    for sequence in range(4, 40):  # many rounds later: still the same two frames, nothing allocated
        gatherer.retire(sequence - 2)
        gatherer.fill(sequence, [_lane(0, 0, tuple(c), c)])
    assert gatherer.staging is staging and staging.shape == (2, packed * len(ORDERS), WIDTH)
    assert gatherer.fills == 39
