"""The latent-attention operators (version 7): stamping, shape rules and the reference meaning (the
absorbed form equals attention over the decompressed keys and values)."""

import numpy as np
import pytest

from helios.program import OPERATOR_SET_VERSION, ProgramBuilder, validate_program
from helios.program import errors as E
from helios.reference.interpreter import execute

HEADS, LATENT, ROPE, NOPE, VALUE, T = 2, 8, 4, 6, 5, 4


def _program():
    b = ProgramBuilder("latent")
    q_nope = b.transport("q_nope", "q_nope", "f32", [3, HEADS * NOPE])
    q_rope = b.transport("q_rope", "q_rope", "f32", [3, HEADS * ROPE])
    latent = b.state("latent", "latent", "f32", [0, T, 1, LATENT])
    rope = b.state("rope", "rope", "f32", [0, T, 1, ROPE])
    lanes, positions = b.transport("lanes", "lanes", "i32", [3]), b.transport("positions", "positions", "i32", [3])
    table = b.transport("table", "table", "i32", [2, 2])
    absorb = b.weight("absorb", resource="absorb", dtype="f32", shape=[HEADS, LATENT, NOPE])
    expand = b.weight("expand", resource="expand", dtype="f32", shape=[HEADS, VALUE, LATENT])
    q_latent = b.head_matmul(q_nope, absorb, name="q_latent")
    attended = b.latent_attention(q_latent, q_rope, latent, rope, lanes, positions, table, scale=0.3, name="attended")
    b.head_matmul(attended, expand, name="out")
    return b.build()


def test_the_latent_operators_stamp_version_7_and_an_older_program_may_not_hold_them():
    program = _program()
    assert program.operator_set_version == OPERATOR_SET_VERSION == 7
    program.operator_set_version = 6
    with pytest.raises(E.OperatorNewerThanProgram, match="head_matmul"):
        validate_program(program)


def test_the_shape_rules_refuse_a_plane_of_several_heads_and_mismatched_widths():
    b = ProgramBuilder("bad")
    q = b.transport("q", "q", "f32", [3, 16])
    q_rope = b.transport("qr", "qr", "f32", [3, 8])
    lanes, table = b.transport("l", "l", "i32", [3]), b.transport("t", "t", "i32", [2, 2])
    two_heads = b.state("two", "two", "f32", [0, 4, 2, 8])
    rope = b.state("rope", "rope", "f32", [0, 4, 1, 4])
    with pytest.raises(E.ShapeRuleViolation, match=r"must be \[pages, T, 1, width\]"):
        b.latent_attention(q, q_rope, two_heads, rope, lanes, lanes, table, scale=0.5)
    latent = b.state("latent", "latent", "f32", [0, 4, 1, 8])
    with pytest.raises(E.ShapeRuleViolation, match=r"q_rope .* must be \[3, 2 heads \* 4\]"):
        b.latent_attention(q, b.transport("q6", "q6", "f32", [3, 6]), latent, rope, lanes, lanes, table, scale=0.5)
    with pytest.raises(E.ShapeRuleViolation, match="width must be heads \\* in"):
        b.head_matmul(q, b.weight("w", resource="w", dtype="f32", shape=[2, 5, 7]))


def test_the_absorbed_form_equals_attention_over_decompressed_keys_and_values():
    rng = np.random.default_rng(7)
    pages = 4
    values = {
        "q_nope": rng.standard_normal((3, HEADS * NOPE)).astype(np.float32),
        "q_rope": rng.standard_normal((3, HEADS * ROPE)).astype(np.float32),
        "latent": rng.standard_normal((pages, T, 1, LATENT)).astype(np.float32),
        "rope": rng.standard_normal((pages, T, 1, ROPE)).astype(np.float32),
        "lanes": np.array([0, 1, -1], np.int32), "positions": np.array([5, 2, 0], np.int32),
        "table": np.array([[2, 0], [3, 1]], np.int32),
        "absorb": rng.standard_normal((HEADS, LATENT, NOPE)).astype(np.float32),  # W_uk^T per head
        "expand": rng.standard_normal((HEADS, VALUE, LATENT)).astype(np.float32),  # W_uv per head
    }
    out = execute(_program(), values)["out"]
    assert not out[2].any()  # the padding row
    for t, (lane, position) in enumerate(((0, 5), (1, 2))):
        slots = [(values["table"][lane, j // T], j % T) for j in range(position + 1)]
        c = np.stack([values["latent"][page, slot, 0] for page, slot in slots]).astype(np.float64)
        k_rope = np.stack([values["rope"][page, slot, 0] for page, slot in slots]).astype(np.float64)
        for h in range(HEADS):
            keys = c @ values["absorb"][h].astype(np.float64)  # k_nope_j = W_uk c_j, [n, NOPE]
            q = values["q_nope"][t, h * NOPE:(h + 1) * NOPE].astype(np.float64)
            qr = values["q_rope"][t, h * ROPE:(h + 1) * ROPE].astype(np.float64)
            scores = 0.3 * (keys @ q + k_rope @ qr)
            weights = np.exp(scores - scores.max())
            weights /= weights.sum()
            head_values = c @ values["expand"][h].T.astype(np.float64)  # v_j = W_uv c_j
            np.testing.assert_allclose(out[t, h * VALUE:(h + 1) * VALUE], weights @ head_values, rtol=1e-4,
                                       atol=1e-5)
