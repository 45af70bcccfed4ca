"""Program validation (host side): `validate_program(program, buffers=None)`.

Checks, in order, before any byte of a program is used:
  1. the operator-set version is one this engine implements;
  2. every tensor is declared once, with a role, a dtype, static extents (only a STATE tensor's
     leading extent may be 0: a cache plane sized at load) and the binding its role needs
     (WEIGHT: a resource; TRANSPORT/STATE/COMPLETION/TUNED: a buffer; SCRATCH: neither);
  3. every operator is known, with known attributes, sorted by name, of the right kind, the
     right number of inputs and outputs, declared tensors, in-place outputs that are the tensor
     they update, and its shape-and-dtype rule satisfied by the declared types;
  4. no WEIGHT, TRANSPORT or TUNED tensor is written (except the TUNED buffers a startup tuning
     producer fills: `produces`), and every SCRATCH or COMPLETION tensor (and every produced TUNED
     tensor) is written before it is read;
  5. with the manifest's buffers, every non-scratch, non-weight tensor agrees with its buffer.

Step 3's spec check (attributes resolved, the shape-and-dtype rule, the operator-set version) is a
function of the operator's op, attributes, tensor types and the program's version alone; the
combinations that passed are kept (`_PASSED`, process-wide), so a core's programs, which repeat a
few hundred combinations over thousands of operators, check each once. A failure is never kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from helios.program.errors import (
    BufferMismatch,
    DuplicateTensor,
    InPlaceMismatch,
    NonStaticExtent,
    OperatorArity,
    OperatorNewerThanProgram,
    OutputTypeMismatch,
    ReadBeforeWrite,
    ReadOnlyTensorWritten,
    ShapeRuleViolation,
    TensorBindingMissing,
    UndeclaredTensor,
    UnknownBuffer,
    UnknownOperator,
    UnsortedAttributes,
    UnspecifiedTensorDType,
    UnspecifiedTensorRole,
    UnsupportedOperatorSetVersion,
)
from helios.program.registry import OPERATORS, SUPPORTED_OPERATOR_SET_VERSIONS
from helios.program.spec import AttributeValue, RuleError
from helios.program.types import DTYPE_NAMES, TensorType, dtype_name
from helios.proto import manifest_pb2, program_pb2

ROLE_NAMES = {
    program_pb2.TENSOR_ROLE_WEIGHT: "WEIGHT",
    program_pb2.TENSOR_ROLE_TRANSPORT: "TRANSPORT",
    program_pb2.TENSOR_ROLE_STATE: "STATE",
    program_pb2.TENSOR_ROLE_SCRATCH: "SCRATCH",
    program_pb2.TENSOR_ROLE_COMPLETION: "COMPLETION",
    program_pb2.TENSOR_ROLE_TUNED: "TUNED",
}
# Tensors an operator may read without an earlier write in the program.
PREFILLED_ROLES = frozenset({
    program_pb2.TENSOR_ROLE_WEIGHT,
    program_pb2.TENSOR_ROLE_TRANSPORT,
    program_pb2.TENSOR_ROLE_STATE,
    program_pb2.TENSOR_ROLE_TUNED,
})
READ_ONLY_ROLES = frozenset({
    program_pb2.TENSOR_ROLE_WEIGHT,
    program_pb2.TENSOR_ROLE_TRANSPORT,
    program_pb2.TENSOR_ROLE_TUNED,
})
# The manifest buffer roles each buffer-bound tensor role may bind.
BUFFER_ROLES = {
    program_pb2.TENSOR_ROLE_TRANSPORT: {manifest_pb2.BUFFER_ROLE_TRANSPORT},
    program_pb2.TENSOR_ROLE_STATE: {manifest_pb2.BUFFER_ROLE_STATE, manifest_pb2.BUFFER_ROLE_CACHE},
    program_pb2.TENSOR_ROLE_COMPLETION: {manifest_pb2.BUFFER_ROLE_COMPLETION},
    program_pb2.TENSOR_ROLE_TUNED: {manifest_pb2.BUFFER_ROLE_TUNED},
}


def attribute_value(attribute: program_pb2.Attribute) -> AttributeValue | None:
    """The Python value of a wire attribute (None when no member of the oneof is set)."""
    kind = attribute.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ints":
        return tuple(attribute.ints.values)
    if kind == "floats":
        return tuple(attribute.floats.values)
    return getattr(attribute, kind)


class _Unset:
    """Stands for an attribute whose oneof holds no value; no kind accepts it."""

    def __repr__(self) -> str:
        return "<no value>"


def operator_attributes(operator: program_pb2.Operator, where: str) -> dict[str, AttributeValue]:
    """The operator's attributes as given (no defaults), checked for order and oneof presence."""
    given: dict[str, AttributeValue] = {}
    previous = None
    for attribute in operator.attributes:
        if previous is not None and attribute.name <= previous:
            raise UnsortedAttributes(
                f"{where}: attributes must be sorted by name without repeats; "
                f"{attribute.name!r} follows {previous!r}"
            )
        previous = attribute.name
        value = attribute_value(attribute)
        if value is None:
            value = _Unset()  # type: ignore[assignment]  # the kind check reports what was needed
        given[attribute.name] = value
    return given


@dataclass(frozen=True, slots=True)
class ValidatedOperator:
    """One operator after validation: its spec name, tensors and resolved attributes."""

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: Mapping[str, AttributeValue]  # defaults filled in; unset optional ones absent


# Declared types by (dtype, shape): a core's programs declare the same few hundred types across
# thousands of tensors (the weights of every graph, the same row extents), and TensorType checks
# itself when made. Bounded: cleared when full.
_TYPES: dict[tuple[int, tuple[int, ...]], TensorType] = {}
# What checking an operator against its spec gave, for each (op, attributes as given, input types,
# output types, operator-set version) that passed: resolving the attributes and the shape-and-dtype
# rule are functions of these alone, and a 0.6B core's 7,735 operators hold 236 distinct
# combinations. Only passes are kept, so every failure is found and reported where it occurs.
_PASSED: dict[tuple, dict[str, AttributeValue]] = {}
_MEMO_LIMIT = 1 << 16


def declared_type(decl: program_pb2.TensorDecl) -> TensorType:
    key = (decl.dtype, tuple(decl.shape))
    known = _TYPES.get(key)
    if known is None:
        if len(_TYPES) >= _MEMO_LIMIT:
            _TYPES.clear()
        known = _TYPES[key] = TensorType(key[0], tuple(int(e) for e in key[1]))
    return known


def check_operator(
    index: int,
    operator: program_pb2.Operator,
    types: Mapping[str, TensorType],
    program: program_pb2.Program | None = None,
) -> ValidatedOperator:
    """Validate one operator against its spec and the declared tensor types (step 3 above); with its
    `program`, also that the operator and its attributes belong to the program's operator-set version."""
    where = f"operators[{index}] ({operator.op or '<empty>'})"
    spec = OPERATORS.get(operator.op)
    if spec is None:
        raise UnknownOperator(
            f"operators[{index}]: unknown operator {operator.op!r}; the operator set has {sorted(OPERATORS)}"
        )
    given = operator_attributes(operator, where)
    inputs, outputs = tuple(operator.inputs), tuple(operator.outputs)
    if not spec.min_inputs <= len(inputs) <= len(spec.inputs):
        wanted = (
            f"{len(spec.inputs)}" if not spec.optional_inputs else f"{spec.min_inputs} to {len(spec.inputs)}"
        )
        raise OperatorArity(f"{where}: takes {wanted} inputs {list(spec.inputs)}, got {len(inputs)}")
    if len(outputs) != len(spec.outputs):
        raise OperatorArity(f"{where}: produces {len(spec.outputs)} outputs {list(spec.outputs)}, got {len(outputs)}")
    for slot, name in [*zip(spec.inputs, inputs, strict=False), *zip(spec.outputs, outputs, strict=True)]:
        if name not in types:
            raise UndeclaredTensor(f"{where}: {slot} names undeclared tensor {name!r}")
    for out_index, in_index in spec.in_place:
        if outputs[out_index] != inputs[in_index]:
            raise InPlaceMismatch(
                f"{where}: output {spec.outputs[out_index]} must be the input {spec.inputs[in_index]} "
                f"tensor {inputs[in_index]!r} it updates, got {outputs[out_index]!r}"
            )
    version = None if program is None else program.operator_set_version
    # attributes by kind and repr: 1, 1.0 and True, or 0.0 and -0.0, are equal keys but not one value
    key = (operator.op, tuple((name, type(value), repr(value)) for name, value in given.items()),
           tuple(types[n] for n in inputs), tuple(types[n] for n in outputs), version)
    attributes = _PASSED.get(key)
    if attributes is None:
        attributes = _check_against_spec(spec, where, given, inputs, outputs, types, program)
        if len(_PASSED) >= _MEMO_LIMIT:
            _PASSED.clear()
        _PASSED[key] = attributes
    return ValidatedOperator(operator.op, inputs, outputs, dict(attributes))


def _check_against_spec(spec, where: str, given: Mapping[str, AttributeValue], inputs: tuple[str, ...],
                        outputs: tuple[str, ...], types: Mapping[str, TensorType],
                        program: program_pb2.Program | None) -> dict[str, AttributeValue]:
    """The operator's resolved attributes, its output types checked against its rule and, with its
    `program`, the operator and its attributes checked to belong to the program's version."""
    attributes = spec.resolve_attributes(given, where)
    try:
        produced = list(spec.rule([types[n] for n in inputs], attributes, [types[n] for n in outputs]))
    except RuleError as error:
        raise ShapeRuleViolation(f"{where}: {error}") from None
    for slot, name, want in zip(spec.outputs, outputs, produced, strict=True):
        have = types[name]
        if have != want:
            raise OutputTypeMismatch(f"{where}: output {slot} {name!r} is declared {have}, the rule gives {want}")
    if program is not None:
        version = program.operator_set_version
        if spec.since > version:
            raise OperatorNewerThanProgram(
                f"{where}: {spec.name} belongs to operator-set version {spec.since}, but program "
                f"{program.graph!r} declares version {version}"
            )
        for name in given:
            since = spec.attribute_map[name].since
            if since > version:
                raise OperatorNewerThanProgram(
                    f"{where}: attribute {name} of {spec.name} belongs to operator-set version "
                    f"{since}, but program {program.graph!r} declares version {version}"
                )
    return attributes


def check_tensor(index: int, decl: program_pb2.TensorDecl) -> TensorType:
    name, role, dtype, shape = decl.name, decl.role, decl.dtype, tuple(decl.shape)
    where = f"tensors[{index}] ({name or '<empty>'})"
    if not name:
        raise UndeclaredTensor(f"tensors[{index}]: a tensor declaration needs a name")
    if role not in ROLE_NAMES:
        raise UnspecifiedTensorRole(f"{where}: role must be one of {sorted(ROLE_NAMES.values())}, got {role}")
    if dtype not in DTYPE_NAMES:
        raise UnspecifiedTensorDType(f"{where}: dtype must be one of {sorted(DTYPE_NAMES.values())}, got {dtype}")
    if 0 in shape:
        for axis, extent in enumerate(shape):
            load_sized = axis == 0 and role == program_pb2.TENSOR_ROLE_STATE and len(shape) > 1
            if extent == 0 and not load_sized:
                raise NonStaticExtent(f"{where}: extent {axis} of {list(shape)} is 0; only a STATE cache plane's "
                                      "leading extent is sized at load")
    resource, buffer = decl.resource, decl.buffer
    if role == program_pb2.TENSOR_ROLE_WEIGHT:
        if not resource or buffer:
            raise TensorBindingMissing(f"{where}: a WEIGHT tensor names a resource and no buffer")
    elif role == program_pb2.TENSOR_ROLE_SCRATCH:
        if resource or buffer:
            raise TensorBindingMissing(f"{where}: a SCRATCH tensor names neither buffer nor resource")
    elif not buffer or resource:
        raise TensorBindingMissing(f"{where}: a {ROLE_NAMES[role]} tensor names a buffer and no resource")
    return declared_type(decl)


def check_buffers(
    program: program_pb2.Program, buffers: Mapping[str, manifest_pb2.BufferDescriptor]
) -> None:
    for index, decl in enumerate(program.tensors):
        if decl.role not in BUFFER_ROLES:
            continue
        where = f"tensors[{index}] ({decl.name})"
        buffer = buffers.get(decl.buffer)
        if buffer is None:
            raise UnknownBuffer(f"{where}: buffer {decl.buffer!r} is not in the execution manifest")
        if buffer.role not in BUFFER_ROLES[decl.role]:
            raise BufferMismatch(
                f"{where}: a {ROLE_NAMES[decl.role]} tensor cannot bind buffer {decl.buffer!r} of role "
                f"{manifest_pb2.BufferRole.Name(buffer.role)}"
            )
        if buffer.dtype != decl.dtype or list(buffer.shape) != list(decl.shape):
            raise BufferMismatch(
                f"{where}: declared {declared_type(decl)} but buffer {decl.buffer!r} is "
                f"{dtype_name(buffer.dtype)}{list(buffer.shape)}"
            )
        if any(e == 0 for e in decl.shape) and buffer.role != manifest_pb2.BUFFER_ROLE_CACHE:
            raise NonStaticExtent(f"{where}: only a CACHE buffer may be sized at load, {decl.buffer!r} is not one")


def validate_program(
    program: program_pb2.Program,
    buffers: Mapping[str, manifest_pb2.BufferDescriptor] | Iterable[manifest_pb2.BufferDescriptor] | None = None,
    *,
    produces: Iterable[str] = (),
) -> tuple[ValidatedOperator, ...]:
    """Validate `program`; return its operators with resolved attributes. Raises a ProgramError.

    `produces` names the TUNED buffers `program` fills (a startup tuning producer's outputs): its
    TUNED tensors bound to them are written, not read before they are, like SCRATCH tensors.
    """
    produces = set(produces)
    if program.operator_set_version not in SUPPORTED_OPERATOR_SET_VERSIONS:
        raise UnsupportedOperatorSetVersion(
            f"program {program.graph!r}: operator_set_version {program.operator_set_version} is not one of "
            f"{sorted(SUPPORTED_OPERATOR_SET_VERSIONS)}"
        )
    types: dict[str, TensorType] = {}
    roles: dict[str, int] = {}
    for index, decl in enumerate(program.tensors):
        if decl.name in types:
            raise DuplicateTensor(f"tensors[{index}]: tensor {decl.name!r} is declared twice")
        types[decl.name] = check_tensor(index, decl)
        roles[decl.name] = decl.role
    produced = {decl.name for decl in program.tensors
                if decl.role == program_pb2.TENSOR_ROLE_TUNED and decl.buffer in produces}
    # A one-element COMPLETION tensor is a per-submission field, and the transport writes the frame
    # index and submission sequence before the program runs (a speculative program reads the frame
    # index to frame its proposal confidence); per-lane fields are the program's to write first.
    written = {name for name, role in roles.items() if (role in PREFILLED_ROLES and name not in produced)
               or (role == program_pb2.TENSOR_ROLE_COMPLETION and types[name].shape == (1,))}
    validated = []
    for index, operator in enumerate(program.operators):
        checked = check_operator(index, operator, types, program)
        spec = OPERATORS[operator.op]
        for slot, name in zip(spec.inputs, checked.inputs, strict=False):
            if name not in written and slot not in spec.updated_inputs:
                raise ReadBeforeWrite(
                    f"operators[{index}] ({operator.op}): input {slot} reads {ROLE_NAMES[roles[name]]} tensor "
                    f"{name!r} before any operator writes it"
                )
        for slot, name in zip(spec.outputs, checked.outputs, strict=True):
            if roles[name] in READ_ONLY_ROLES and name not in produced:
                raise ReadOnlyTensorWritten(
                    f"operators[{index}] ({operator.op}): output {slot} writes {ROLE_NAMES[roles[name]]} tensor "
                    f"{name!r}, which programs only read"
                )
            written.add(name)
        validated.append(checked)
    if buffers is not None:
        if not isinstance(buffers, Mapping):
            buffers = {b.name: b for b in buffers}
        check_buffers(program, buffers)
    return tuple(validated)
