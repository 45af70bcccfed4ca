"""The vision-encoder operators (version 6): stamping, shape rules and the reference meaning."""

import numpy as np
import pytest

from helios.program import OPERATOR_SET_VERSION, ProgramBuilder, validate_program
from helios.program import errors as E
from helios.reference.interpreter import execute


def _attention_program(group_rows: int = 6, heads: int = 4, kv_heads: int = 2, head_dim: int = 8):
    b = ProgramBuilder("vision")
    q = b.transport("q", "q", "f32", [group_rows, heads * head_dim])
    k = b.transport("k", "k", "f32", [group_rows, kv_heads * head_dim])
    v = b.transport("v", "v", "f32", [group_rows, kv_heads * head_dim])
    group = b.transport("group", "group", "i32", [group_rows])
    attended = b.bidirectional_attention(q, k, v, group, scale=head_dim ** -0.5, head_dim=head_dim, name="attended")
    b.activation(attended, activation="quick_gelu", name="out")
    return b.build()


def test_the_vision_operators_stamp_version_6_and_an_older_program_may_not_hold_them():
    program = _attention_program()
    assert program.operator_set_version == 6 < OPERATOR_SET_VERSION
    program.operator_set_version = 5
    with pytest.raises(E.OperatorNewerThanProgram, match="bidirectional_attention"):
        validate_program(program)


def test_bidirectional_attention_rejects_mismatched_heads_and_groups():
    b = ProgramBuilder("bad")
    q = b.transport("q", "q", "f32", [4, 24])
    k = b.transport("k", "k", "f32", [4, 16])
    with pytest.raises(E.ShapeRuleViolation, match="not a multiple of 2 kv heads"):
        b.bidirectional_attention(q, k, k, b.transport("g", "g", "i32", [4]), scale=0.5, head_dim=8)
    with pytest.raises(E.ShapeRuleViolation, match="group must be i32"):
        b.bidirectional_attention(k, k, k, b.transport("g2", "g2", "i32", [3]), scale=0.5, head_dim=8)


def test_each_row_attends_its_whole_group_and_padding_rows_give_zeros():
    rng = np.random.default_rng(3)
    program = _attention_program()
    group = np.array([1, 0, 1, -1, 0, 1], np.int32)
    values = {"q": rng.standard_normal((6, 32)).astype(np.float32),
              "k": rng.standard_normal((6, 16)).astype(np.float32),
              "v": rng.standard_normal((6, 16)).astype(np.float32), "group": group}
    env = execute(program, values)
    attended, out = env["attended"], env["out"]
    assert not attended[3].any()  # the padding row
    for t in (0, 1, 2, 4, 5):
        members = np.flatnonzero(group == group[t])
        for h in range(4):
            q = values["q"][t, h * 8:(h + 1) * 8].astype(np.float64)
            kv = h // 2
            keys = values["k"][members, kv * 8:(kv + 1) * 8].astype(np.float64)
            scores = keys @ q / np.sqrt(8.0)
            weights = np.exp(scores - scores.max())
            weights /= weights.sum()
            expected = weights @ values["v"][members, kv * 8:(kv + 1) * 8].astype(np.float64)
            np.testing.assert_allclose(attended[t, h * 8:(h + 1) * 8], expected, rtol=1e-5, atol=1e-6)
    x = attended.astype(np.float64)
    np.testing.assert_allclose(out, x / (1 + np.exp(-1.702 * x)), rtol=1e-5, atol=1e-6)
