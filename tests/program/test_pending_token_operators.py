"""`gather` and `where`: the two operators a device-owned pending token needs (shape rules, the
in-place STATE update the recipe writes, and their errors)."""

from __future__ import annotations

import pytest

from helios.program import ProgramBuilder, TensorType
from helios.program import errors as E
from helios.program.types import BF16, I32


def test_gather_picks_rows_of_any_dtype_and_keeps_trailing_extents():
    b = ProgramBuilder("g")
    pending = b.state("pending", "pending_tokens", "i32", [4])
    lanes = b.transport("lanes", "token_lane", "i32", [7])
    table = b.transport("table", "table", "bf16", [4, 3, 2])
    assert b.type_of(b.gather(pending, lanes)) == TensorType(I32, (7,))
    assert b.type_of(b.gather(table, lanes)) == TensorType(BF16, (7, 3, 2))
    b.build()


def test_where_updates_a_state_row_in_place_where_the_condition_is_zero():
    b = ProgramBuilder("g")
    pending = b.state("pending", "pending_tokens", "i32", [4])
    decision = b.transport("decision", "decision", "i32", [4])
    sampled = b.transport("sampled", "sampled", "i32", [4])
    assert b.where(decision, sampled, pending, into=pending) == pending
    program = b.build()
    assert [(o.op, list(o.inputs), list(o.outputs)) for o in program.operators] == [
        ("where", ["decision", "sampled", "pending"], ["pending"])]


@pytest.mark.parametrize(("x", "index", "message"), [
    (("i32", [4]), ("i64", [7]), "index must be i32 of rank 1"),
    (("i32", [4]), ("i32", [7, 1]), "index must be i32 of rank 1"),
    (("f32", []), ("i32", [7]), "x must have rank >= 1"),
])
def test_gather_rejects_bad_operands(x, index, message):
    b = ProgramBuilder("g")
    xs = b.transport("x", "x", x[0], x[1])
    ids = b.transport("i", "i", index[0], index[1])
    with pytest.raises(E.ShapeRuleViolation, match=message):
        b.gather(xs, ids)


@pytest.mark.parametrize(("cond", "a", "b", "message"), [
    (("i32", [4]), ("i32", [4]), ("i64", [4]), "a and b must have one shape and dtype"),
    (("i32", [4]), ("f32", [4]), ("f32", [5]), "a and b must have one shape and dtype"),
    (("f32", [4]), ("i32", [4]), ("i32", [4]), "cond must be i32"),
    (("i32", [3]), ("i32", [4]), ("i32", [4]), "cond must be i32 of the shape"),
])
def test_where_rejects_bad_operands(cond, a, b, message):
    builder = ProgramBuilder("g")
    names = [builder.transport(n, n, d, s) for n, (d, s) in (("c", cond), ("a", a), ("b", b))]
    with pytest.raises(E.ShapeRuleViolation, match=message):
        builder.where(*names)


def test_gather_and_where_belong_to_operator_set_version_2():
    from helios.program import OPERATOR_SET_VERSION, SUPPORTED_OPERATOR_SET_VERSIONS, validate_program

    assert OPERATOR_SET_VERSION == 7 and SUPPORTED_OPERATOR_SET_VERSIONS == {1, 2, 3, 4, 5, 6, 7}
    b = ProgramBuilder("g")
    pending = b.state("pending", "pending_tokens", "i32", [4])
    decision = b.transport("decision", "decision", "i32", [4])
    sampled = b.transport("sampled", "sampled", "i32", [4])
    b.where(decision, sampled, pending, into=pending)
    program = b.build()
    # stamped with the oldest version holding its operators: 2, below the newest
    assert program.operator_set_version == 2 < OPERATOR_SET_VERSION
    validate_program(program)  # a version-2 program may
    program.operator_set_version = 1  # a version-1 program may not use a version-2 operator
    with pytest.raises(E.OperatorNewerThanProgram, match=r"operators\[0\] \(where\).*version 2.*declares version 1"):
        validate_program(program)


def test_a_version_1_program_still_validates():
    from helios.program import validate_program

    b = ProgramBuilder("g")
    x = b.transport("x", "x", "f32", [4])
    y = b.transport("y", "y", "f32", [4])
    b.add(x, y, name="s")
    b.copy("s", into=b.completion("out", "out", "f32", [4]))
    program = b.build()
    program.operator_set_version = 1
    validate_program(program)
