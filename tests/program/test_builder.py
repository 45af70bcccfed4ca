"""The program builder: inferred scratch types, `into=`, naming, determinism, early errors."""

from __future__ import annotations

import pytest

from helios.program import OPERATOR_SET_VERSION, ProgramBuilder, TensorType, validate_program
from helios.program import errors as E
from helios.program.types import BF16, F32, I32
from helios.proto import program_pb2
from tests.program.tiny import HEAD_DIM, HEADS, P, tiny_buffers, tiny_builder


def test_identical_builder_calls_give_byte_identical_programs():
    first, second = tiny_builder().build(), tiny_builder().build()
    assert first.SerializeToString(deterministic=True) == second.SerializeToString(deterministic=True)
    # stamped with the oldest version holding its operators (2: no version-3 operator is used)
    assert first.operator_set_version == 2 < OPERATOR_SET_VERSION
    assert (first.graph, first.rank) == ("decode_b2", 0)


def test_a_program_using_a_newer_operator_is_stamped_with_its_version():
    b = ProgramBuilder("g")
    out = b.state("out", "rows", "i32", [4])
    x = b.transport("x", "x", "i32", [2])
    index = b.transport("index", "index", "i32", [2])
    b.scatter(x, index, into=out)
    assert b.build().operator_set_version == 3 < OPERATOR_SET_VERSION


def test_a_collective_or_a_row_offset_stamps_version_4_and_an_older_program_may_not_hold_them():
    b = ProgramBuilder("g", rank=1)
    x = b.transport("x", "x", "f32", [2, 8])
    b.all_reduce(x, ranks=2, name="summed")
    b.all_gather(x, ranks=2, name="joined")
    assert b.build().operator_set_version == 4 < OPERATOR_SET_VERSION
    assert b.type_of("joined") == TensorType(F32, (2, 16))

    e = ProgramBuilder("e")
    ids = e.transport("ids", "ids", "i32", [3])
    table = e.weight("table", resource="w", dtype="f32", shape=[4, 8])
    e.embedding(ids, table, row_offset=4)
    program = e.build()
    assert program.operator_set_version == 4
    program.operator_set_version = 3
    with pytest.raises(E.OperatorNewerThanProgram, match="attribute row_offset of embedding"):
        validate_program(program)
    plain = ProgramBuilder("p")
    plain.embedding(plain.transport("ids", "ids", "i32", [3]),
                    plain.weight("table", resource="w", dtype="f32", shape=[4, 8]), row_offset=0)
    assert plain.build().operator_set_version == 2  # offset 0 is left unset: what every older program means


def test_the_per_position_grammar_masks_stamp_version_5_and_an_older_program_may_not_hold_them():
    b = ProgramBuilder("s")
    logits = b.fill(0, shape=(6, 40), dtype="f32", name="logits")
    draft = b.fill(0, shape=(2, 3, 40), dtype="f32", name="draft")
    masks = b.transport("masks", "masks", "i32", [2, 4, 2])
    lengths = b.transport("lengths", "lengths", "i32", [2])
    assert b.speculative_grammar_mask(logits, draft, masks, lengths) == (logits, draft)  # in place
    program = b.build()
    assert program.operator_set_version == 5 < OPERATOR_SET_VERSION
    program.operator_set_version = 4
    with pytest.raises(E.OperatorNewerThanProgram, match="speculative_grammar_mask"):
        validate_program(program)
    bad = ProgramBuilder("t")
    wrong = bad.transport("masks", "masks", "i32", [2, 4, 1])  # one word cannot mask 40 ids
    with pytest.raises(E.ShapeRuleViolation, match="masks must be i32"):
        bad.speculative_grammar_mask(bad.fill(0, shape=(6, 40), dtype="f32", name="l"),
                                     bad.fill(0, shape=(2, 3, 40), dtype="f32", name="d"), wrong,
                                     bad.transport("n", "n", "i32", [2]))


def test_a_built_program_round_trips_through_bytes_and_validates_against_its_buffers():
    program = tiny_builder().build(tiny_buffers())
    parsed = program_pb2.Program.FromString(program.SerializeToString())
    assert parsed == program
    validate_program(parsed, tiny_buffers())


def test_scratch_outputs_get_inferred_types_and_generated_names():
    b = ProgramBuilder("g")
    x = b.transport("x", "x", "bf16", [P, HEADS * HEAD_DIM])
    w = b.weight("w", "w", "bf16", [24, HEADS * HEAD_DIM])
    y = b.matmul(x, w)
    z = b.head_rms_norm(x, b.weight("n", "n", "bf16", [HEAD_DIM]), eps=1e-6, head_dim=HEAD_DIM, name="normed")
    assert (y, z) == ("matmul_0", "normed")
    assert b.type_of(y) == TensorType(BF16, (P, 24))
    assert b.type_of(z) == TensorType(BF16, (P, HEADS * HEAD_DIM))
    decl = b.build().tensors[-1]
    assert (decl.name, decl.role) == ("normed", program_pb2.TENSOR_ROLE_SCRATCH)


def test_attributes_are_sorted_and_unset_optional_ones_are_omitted():
    program = tiny_builder().build()
    rotary = next(o for o in program.operators if o.op == "rotary")
    names = [a.name for a in rotary.attributes]
    assert names == sorted(names) == ["head_dim", "rope_type", "rotary_dim", "theta"]
    assert next(a for a in rotary.attributes if a.name == "rotary_dim").i == HEAD_DIM  # defaults to head_dim
    attention = next(o for o in program.operators if o.op == "paged_attention")
    assert [a.name for a in attention.attributes] == ["scale"]


def test_into_writes_an_existing_tensor_and_checks_its_type():
    b = ProgramBuilder("g")
    logits = b.transport("logits", "logits", "f32", [2, 10])
    ids = b.completion("ids", "ids", "i32", [2, 1])
    b.copy(b.argmax(logits), into=ids)
    assert b.build().operators[-1].outputs == ["ids"]
    wrong = b.completion("wrong", "wrong", "f32", [2])
    with pytest.raises(E.ShapeRuleViolation, match="copy"):
        b.copy(b.argmax(logits), into=wrong)


def test_fill_takes_its_type_from_the_target_or_from_arguments():
    b = ProgramBuilder("g")
    target = b.completion("cursor", "cursor", "i32", [3])
    b.fill(-1, into=target)
    made = b.fill(0.5, shape=[2, 2], dtype="f32")
    assert b.type_of(made) == TensorType(F32, (2, 2))
    with pytest.raises(ValueError, match="fill needs"):
        b.fill(1)
    with pytest.raises(E.ShapeRuleViolation, match="integral"):
        b.fill(0.5, shape=[2], dtype="i32")
    fill = b.build().operators[0]
    assert {a.name: a.WhichOneof("value") for a in fill.attributes} == {"dtype": "s", "shape": "ints", "value": "f"}


def test_errors_surface_when_the_operator_is_emitted():
    b = ProgramBuilder("g")
    x = b.transport("x", "x", "f32", [4, 8])
    with pytest.raises(E.ShapeRuleViolation, match=r"program 'g' operators\[0\] \(matmul\)"):
        b.matmul(x, b.weight("w", "w", "f32", [8, 9]))
    with pytest.raises(E.UnknownOperator):
        b.emit("conv2d", [x])
    with pytest.raises(E.UnknownAttribute, match="beta"):
        b.emit("rms_norm", [x, x], {"eps": 1e-6, "beta": 1.0})
    with pytest.raises(E.AttributeTypeMismatch, match="lanes"):
        b.last_row_gather(x, b.transport("lane", "lane", "i32", [4]), lanes=2.0)  # type: ignore[arg-type]
    with pytest.raises(E.MissingAttribute, match="activation"):
        b.emit("gated_activation", [x, x])
    with pytest.raises(E.DuplicateTensor):
        b.transport("x", "x2", "f32", [1])
    with pytest.raises(E.UndeclaredTensor):
        b.add(x, "ghost")


def test_rope_scaling_rules_are_checked_when_emitted():
    b = ProgramBuilder("g")
    x = b.transport("x", "x", "f32", [4, 8])
    pos = b.transport("pos", "pos", "i32", [4])
    with pytest.raises(E.ShapeRuleViolation, match="original_max_position_embeddings"):
        b.rotary(x, pos, theta=1e4, head_dim=4, rope_type="yarn", factor=4.0)
    with pytest.raises(E.ShapeRuleViolation, match="rotary_dim"):
        b.rotary(x, pos, theta=1e4, head_dim=4, rotary_dim=3)
    out = b.rotary(x, pos, theta=1e4, head_dim=4, rope_type="frequency_band", factor=8.0, low_freq_factor=1.0,
                   high_freq_factor=4.0, original_max_position_embeddings=8192)
    assert b.type_of(out) == TensorType(F32, (4, 8))


def test_sample_declares_its_per_row_inputs():
    b = ProgramBuilder("g")
    logits = b.transport("logits", "l", "f32", [3, 70])
    ids = b.sample(logits, b.transport("seed", "s", "i64", [3]), b.transport("pos", "p", "i32", [3]),
                   b.transport("params", "q", "f32", [3, 7]), b.transport("hist", "h", "i32", [3, 70]),
                   b.transport("mask", "m", "i32", [3, 3]))
    assert b.type_of(ids) == TensorType(I32, (3,))
    with pytest.raises(E.ShapeRuleViolation, match="grammar_mask"):
        b.sample(logits, "seed", "pos", "params", "hist", b.transport("bad", "b", "i32", [3, 2]))


def test_builder_arguments_are_validated():
    with pytest.raises(ValueError):
        ProgramBuilder("")
    with pytest.raises(ValueError):
        ProgramBuilder("g", rank=-1)


def test_the_recurrent_operators_stamp_version_6_and_an_older_program_may_not_hold_them():
    b = ProgramBuilder("r")
    state = b.state("state", "state", "f32", [3, 2, 8])
    x = b.transport("x", "x", "f32", [5, 8])
    lanes, positions = b.transport("lanes", "lanes", "i32", [5]), b.transport("positions", "positions", "i32", [5])
    rows = b.transport("rows", "rows", "i32", [2])
    out = b.short_convolution(state, x, b.weight("w", resource="w", dtype="f32", shape=[8, 1, 3]), lanes,
                              positions, rows, name="conv")
    assert out == "conv" and b.type_of(out).shape == (5, 8)
    b.state_row_copy(state, rows, rows)
    program = b.build()
    assert program.operator_set_version == 6 < OPERATOR_SET_VERSION
    program.operator_set_version = 5
    with pytest.raises(E.OperatorNewerThanProgram, match="short_convolution"):
        validate_program(program)
    bad = ProgramBuilder("t")
    with pytest.raises(E.ShapeRuleViolation, match="state must be floating"):
        bad.short_convolution(bad.state("state", "state", "f32", [3, 3, 8]), bad.transport("x", "x", "f32", [5, 8]),
                              bad.weight("w", resource="w", dtype="f32", shape=[8, 1, 3]),
                              bad.transport("lanes", "lanes", "i32", [5]),
                              bad.transport("positions", "positions", "i32", [5]),
                              bad.transport("rows", "rows", "i32", [2]))
