"""Reference semantics of `gather` and `where` (docs/operators.md): exact, integer and float."""

from __future__ import annotations

import numpy as np

from helios.program import ProgramBuilder
from helios.reference.interpreter import execute
from helios.reference.operators import gather, where


def test_gather_reads_rows_by_index_and_zero_rows_outside():
    x = np.array([[1.5, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
    out = gather(x, np.array([2, -1, 0, 3, 2], np.int32))
    assert out.dtype == np.float32
    assert out.tolist() == [[5.0, 6.0], [0.0, 0.0], [1.5, 2.0], [0.0, 0.0], [5.0, 6.0]]
    tokens = gather(np.array([70, 71, 72], np.int32), np.array([1, 1, -1, 0], np.int32))
    assert tokens.dtype == np.int32 and tokens.tolist() == [71, 71, 0, 70]


def test_where_selects_elementwise_on_a_nonzero_condition():
    out = where(np.array([1, 0, -3, 0], np.int32), np.array([10, 11, 12, 13], np.int32),
                np.array([20, 21, 22, 23], np.int32))
    assert out.dtype == np.int32 and out.tolist() == [10, 21, 12, 23]
    floats = where(np.array([[0, 2]], np.int32), np.array([[1.0, 2.0]], np.float32),
                   np.array([[np.nan, np.inf]], np.float32))
    assert np.isnan(floats[0, 0]) and floats[0, 1] == 2.0


def test_the_pending_token_round_trip_through_the_interpreter():
    """Tokens of prompt rows come from the host, the others from the lane's STATE row; sampling lanes
    write their token back into that row and the others keep theirs."""
    b = ProgramBuilder("g")
    host = b.transport("host", "tokens", "i32", [5])
    mark = b.transport("mark", "prompt_mark", "i32", [5])
    lanes = b.transport("lanes", "token_lane", "i32", [5])
    pending = b.state("pending", "pending_tokens", "i32", [3])
    decision = b.transport("decision", "decision", "i32", [3])
    sampled = b.transport("sampled", "sampled", "i32", [3])
    tokens = b.where(mark, host, b.gather(pending, lanes), name="tokens")
    b.where(decision, sampled, pending, into=pending)
    state = np.array([40, 41, 42], np.int32)
    env = execute(b.build(), {
        "tokens": np.array([7, 8, -1, -1, -1], np.int32), "prompt_mark": np.array([8, 9, 0, 0, 0], np.int32),
        "token_lane": np.array([0, 0, 2, 1, -1], np.int32), "pending_tokens": state,
        "decision": np.array([1, 0, 1], np.int32), "sampled": np.array([50, 51, 52], np.int32)})
    assert env[tokens].tolist() == [7, 8, 42, 41, 0]
    assert state.tolist() == [50, 41, 52]  # written in place: the persistent buffer itself
