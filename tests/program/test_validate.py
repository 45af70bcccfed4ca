"""Program validation: a valid program passes; each broken invariant raises its own error, located."""

from __future__ import annotations

import pytest

from helios.errors import HeliosError
from helios.program import OPERATOR_SET_VERSION, ProgramBuilder, validate_program
from helios.program import errors as E
from helios.proto import manifest_pb2, program_pb2
from tests.program.tiny import tiny_buffers, tiny_builder


@pytest.fixture
def program() -> program_pb2.Program:
    return tiny_builder().build()


def op_index(program: program_pb2.Program, op: str) -> int:
    return next(i for i, o in enumerate(program.operators) if o.op == op)


def tensor_index(program: program_pb2.Program, name: str) -> int:
    return next(i for i, t in enumerate(program.tensors) if t.name == name)


def test_a_valid_program_passes_with_and_without_buffers(program):
    validated = validate_program(program)
    assert [v.op for v in validated] == [o.op for o in program.operators]
    rms = validated[op_index(program, "rms_norm")]
    assert rms.attributes == {"eps": pytest.approx(1e-6), "weight_offset": 0.0}  # the default filled in
    attention = validated[op_index(program, "paged_attention")]
    assert "sliding_window" not in attention.attributes  # optional, unset
    validate_program(program, tiny_buffers())
    validate_program(program, list(tiny_buffers().values()))


def test_every_program_error_is_a_helios_error():
    for name in dir(E):
        value = getattr(E, name)
        if isinstance(value, type) and issubclass(value, Exception) and value.__module__ == E.__name__:
            assert issubclass(value, HeliosError), name


def test_unsupported_operator_set_version(program):
    program.operator_set_version = OPERATOR_SET_VERSION + 1
    with pytest.raises(E.UnsupportedOperatorSetVersion, match="operator_set_version"):
        validate_program(program)


def test_unknown_operator_names_the_operator_and_its_index(program):
    program.operators[3].op = "fused_magic"
    with pytest.raises(E.UnknownOperator, match=r"operators\[3\].*'fused_magic'"):
        validate_program(program)


def test_unknown_attribute(program):
    i = op_index(program, "rms_norm")
    program.operators[i].attributes.append(program_pb2.Attribute(name="zeta", f=1.0))
    with pytest.raises(E.UnknownAttribute, match=rf"operators\[{i}\] \(rms_norm\).*'zeta'"):
        validate_program(program)


def test_missing_required_attribute(program):
    i = op_index(program, "paged_attention")
    del program.operators[i].attributes[:]
    with pytest.raises(E.MissingAttribute, match=rf"operators\[{i}\] \(paged_attention\).*'scale'"):
        validate_program(program)


def test_attribute_of_the_wrong_kind(program):
    i = op_index(program, "last_row_gather")
    program.operators[i].attributes[0].f = 2.0
    with pytest.raises(E.AttributeTypeMismatch, match="lanes"):
        validate_program(program)


def test_attribute_without_a_value(program):
    i = op_index(program, "last_row_gather")
    program.operators[i].attributes[0].ClearField("i")
    with pytest.raises(E.AttributeTypeMismatch, match="lanes"):
        validate_program(program)


def test_string_attribute_outside_its_choices(program):
    i = op_index(program, "rotary")
    next(a for a in program.operators[i].attributes if a.name == "rope_type").s = "spiral"
    with pytest.raises(E.InvalidAttributeValue, match="spiral"):
        validate_program(program)


def test_unsorted_or_repeated_attributes(program):
    i = op_index(program, "rotary")
    attributes = list(program.operators[i].attributes)
    del program.operators[i].attributes[:]
    program.operators[i].attributes.extend(reversed(attributes))
    with pytest.raises(E.UnsortedAttributes):
        validate_program(program)
    program.operators[i].attributes.sort(key=lambda a: a.name)
    program.operators[i].attributes.append(attributes[-1])
    with pytest.raises(E.UnsortedAttributes):
        validate_program(program)


def test_arity(program):
    i = op_index(program, "add")
    program.operators[i].inputs.append("x")
    with pytest.raises(E.OperatorArity, match="inputs"):
        validate_program(program)
    program.operators[i].inputs.pop()
    program.operators[i].outputs.append("x")
    with pytest.raises(E.OperatorArity, match="outputs"):
        validate_program(program)


def test_undeclared_tensor(program):
    program.operators[0].inputs[0] = "nowhere"
    with pytest.raises(E.UndeclaredTensor, match="'nowhere'"):
        validate_program(program)


def test_shape_rule_violation(program):
    program.tensors[tensor_index(program, "wq")].shape[1] = 15
    with pytest.raises(E.ShapeRuleViolation, match=r"operators\[\d+\] \(matmul\)"):
        validate_program(program)


def test_declared_output_disagreeing_with_the_rule(program):
    program.tensors[tensor_index(program, "x")].dtype = manifest_pb2.DTYPE_BF16
    with pytest.raises(E.OutputTypeMismatch, match="'x'"):
        validate_program(program)


def test_in_place_output_must_be_the_updated_tensor(program):
    i = op_index(program, "paged_cache_write")
    program.operators[i].outputs[0] = "value_cache"
    with pytest.raises(E.InPlaceMismatch, match="key_cache"):
        validate_program(program)


def test_scratch_read_before_write(program):
    i = op_index(program, "add")
    program.operators.insert(0, program.operators[i])
    with pytest.raises(E.ReadBeforeWrite, match=r"operators\[0\] \(add\).*SCRATCH"):
        validate_program(program)


def test_completion_read_before_write(program):
    program.operators.insert(0, program_pb2.Operator(op="copy", inputs=["sampled"], outputs=["reserved"]))
    with pytest.raises(E.ReadBeforeWrite, match="COMPLETION"):
        validate_program(program)


@pytest.mark.parametrize("declare, role", [("weight", "WEIGHT"), ("transport", "TRANSPORT"), ("tuned", "TUNED")])
def test_weight_transport_and_tuned_tensors_are_never_written(declare, role):
    b = tiny_builder()
    binding = {"resource": "r"} if declare == "weight" else {"buffer": "spare"}
    spare = getattr(b, declare)("spare", dtype="i32", shape=[2], **binding)
    b.fill(3, into=spare)
    with pytest.raises(E.ReadOnlyTensorWritten, match=f"{role} tensor 'spare'"):
        b.build()


def test_duplicate_tensor(program):
    program.tensors.append(program.tensors[0])
    with pytest.raises(E.DuplicateTensor, match="'ids'"):
        validate_program(program)


def test_unspecified_role_and_dtype(program):
    program.tensors[0].role = program_pb2.TENSOR_ROLE_UNSPECIFIED
    with pytest.raises(E.UnspecifiedTensorRole, match=r"tensors\[0\] \(ids\)"):
        validate_program(program)
    program.tensors[0].role = program_pb2.TENSOR_ROLE_TRANSPORT
    program.tensors[0].dtype = manifest_pb2.DTYPE_UNSPECIFIED
    with pytest.raises(E.UnspecifiedTensorDType):
        validate_program(program)


def test_only_a_state_planes_leading_extent_may_be_zero(program):
    program.tensors[tensor_index(program, "key_cache")].shape[1] = 0
    with pytest.raises(E.NonStaticExtent, match="extent 1"):
        validate_program(program)
    program.tensors[tensor_index(program, "key_cache")].shape[1] = 4
    program.tensors[tensor_index(program, "ids")].shape[0] = 0
    with pytest.raises(E.NonStaticExtent, match="extent 0"):
        validate_program(program)


def test_roles_need_their_binding(program):
    program.tensors[tensor_index(program, "embed")].resource = ""
    with pytest.raises(E.TensorBindingMissing, match="WEIGHT"):
        validate_program(program)
    program.tensors[tensor_index(program, "embed")].resource = "model.embed"
    program.tensors[tensor_index(program, "ids")].buffer = ""
    with pytest.raises(E.TensorBindingMissing, match="TRANSPORT"):
        validate_program(program)
    program.tensors[tensor_index(program, "ids")].buffer = "tokens"
    program.tensors[tensor_index(program, "x")].buffer = "x"
    with pytest.raises(E.TensorBindingMissing, match="SCRATCH"):
        validate_program(program)


def test_unknown_buffer(program):
    buffers = tiny_buffers()
    del buffers["positions"]
    with pytest.raises(E.UnknownBuffer, match="'positions'"):
        validate_program(program, buffers)


def test_buffer_dtype_shape_and_role_must_agree(program):
    buffers = tiny_buffers()
    buffers["tokens"].shape[0] = 8
    with pytest.raises(E.BufferMismatch, match="'tokens'"):
        validate_program(program, buffers)
    buffers = tiny_buffers()
    buffers["completion.sampled"].role = manifest_pb2.BUFFER_ROLE_STATE
    with pytest.raises(E.BufferMismatch, match="COMPLETION tensor"):
        validate_program(program, buffers)
    buffers = tiny_buffers()
    buffers["cache.k"].role = manifest_pb2.BUFFER_ROLE_STATE
    with pytest.raises(E.NonStaticExtent, match="CACHE"):
        validate_program(program, buffers)


def test_a_combination_that_passed_once_is_still_checked_exactly_in_another_operator(program):
    """Validation keeps what passed (the same op, attributes and types recur across a core's programs);
    a value equal to a passed one but of another kind or sign is not that combination."""
    validate_program(program)  # every combination of the program passes, and is kept
    i = op_index(program, "last_row_gather")
    lanes = program.operators[i].attributes[0]
    lanes.f = float(lanes.i)  # 2.0 == 2, but a float where the operator takes an int
    with pytest.raises(E.AttributeTypeMismatch, match="lanes"):
        validate_program(program)

    def norm_offsets(value: float) -> list[float]:
        fresh = tiny_builder().build()
        for operator in fresh.operators:
            if operator.op == "rms_norm":
                operator.attributes.append(program_pb2.Attribute(name="weight_offset", f=value))
        return [str(v.attributes["weight_offset"]) for v in validate_program(fresh) if v.op == "rms_norm"]

    assert set(norm_offsets(0.0)) == {"0.0"}
    assert set(norm_offsets(-0.0)) == {"-0.0"}  # equal to 0.0, but not the value the program gave


def test_an_operator_passed_at_one_version_is_checked_again_at_another():
    builder = ProgramBuilder("e")
    builder.embedding(builder.transport("ids", "ids", "i32", [3]),
                      builder.weight("table", resource="w", dtype="f32", shape=[4, 8]), row_offset=4)
    program = builder.build()
    assert program.operator_set_version == 4  # the attribute row_offset came with version 4
    validate_program(program)  # passes, and is kept
    program.operator_set_version = 3
    with pytest.raises(E.OperatorNewerThanProgram, match="attribute row_offset of embedding"):
        validate_program(program)
