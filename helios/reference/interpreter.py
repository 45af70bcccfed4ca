"""The reference program interpreter (host side): executes a `program_pb2.Program` with NumPy.

    execute(program, tensors) -> dict of every tensor's array

Binding. `tensors` maps names to arrays. A WEIGHT tensor is looked up by its tensor name, then by
its resource id; a TRANSPORT, STATE, COMPLETION or TUNED tensor by its tensor name, then by its
buffer name. Every non-scratch tensor must be bound, with the declared shape (a load-sized leading
extent 0 accepts any extent) and the NumPy dtype of its declared dtype (`NUMPY_DTYPES`: BF16 tensors
are float32 arrays holding bf16-representable values; `bf16_to_f32` converts raw bits).

Execution. The program is validated, SCRATCH tensors are created as operators write them, and
operators run in order. Every result is rounded to its output's declared dtype (round to nearest
even for bf16) and reshaped to its declared shape; STATE and COMPLETION outputs are written in place
into the caller's arrays (TRANSPORT, WEIGHT and TUNED are never written). Before an in-place
operator runs, its floating inputs are rounded to the dtype of the tensor it updates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from helios.errors import HeliosError
from helios.program.registry import OPERATORS
from helios.program.types import BF16, FLOAT_DTYPES, TensorType
from helios.program.validate import ValidatedOperator, declared_type, validate_program
from helios.proto import program_pb2
from helios.reference.operators import NUMPY_DTYPES, REFERENCE_OPERATORS


class MissingTensorValue(HeliosError):
    """A non-scratch tensor of the program has no array among the bound tensors."""


class TensorValueMismatch(HeliosError):
    """A bound array's shape or dtype disagrees with the tensor's declaration."""


class ReadOnlyTensorValue(HeliosError):
    """A STATE or COMPLETION array the program writes is not writable."""


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """float32 values of raw bf16 bits (uint16 array)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Raw bf16 bits (uint16) of float32 values, rounded to nearest even (NaN stays NaN)."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    rounded = ((bits + rounding) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(np.asarray(values, dtype=np.float32))
    return np.where(nan, np.uint16(0x7FC0), rounded).astype(np.uint16)


def round_to_dtype(values: np.ndarray, dtype: int) -> np.ndarray:
    """`values` stored as `dtype` would hold them, as the NumPy array type of that dtype."""
    if dtype == BF16:
        return bf16_to_f32(f32_to_bf16(np.asarray(values, dtype=np.float32)))
    return np.asarray(values).astype(NUMPY_DTYPES[dtype])


def _bind(decl: program_pb2.TensorDecl, tensors: Mapping[str, np.ndarray]) -> np.ndarray:
    alternative = decl.resource if decl.role == program_pb2.TENSOR_ROLE_WEIGHT else decl.buffer
    if decl.name in tensors:
        array = tensors[decl.name]
    elif alternative and alternative in tensors:
        array = tensors[alternative]
    else:
        kind = "resource" if decl.role == program_pb2.TENSOR_ROLE_WEIGHT else "buffer"
        raise MissingTensorValue(
            f"tensor {decl.name!r} ({kind} {alternative!r}) has no bound array; bind it by tensor or {kind} name"
        )
    if not isinstance(array, np.ndarray):
        raise TensorValueMismatch(f"tensor {decl.name!r}: bound value is {type(array).__name__}, not a NumPy array")
    want = declared_type(decl)
    shape_ok = array.ndim == want.rank and all(
        w == 0 or a == w for a, w in zip(array.shape, want.shape, strict=True)
    )
    if not shape_ok or array.dtype != np.dtype(NUMPY_DTYPES[decl.dtype]):
        raise TensorValueMismatch(
            f"tensor {decl.name!r} is declared {want} (NumPy {np.dtype(NUMPY_DTYPES[decl.dtype]).name}), "
            f"bound array is {array.dtype.name}{list(array.shape)}"
        )
    writable_roles = (program_pb2.TENSOR_ROLE_STATE, program_pb2.TENSOR_ROLE_COMPLETION)
    if decl.role in writable_roles and not array.flags.writeable:
        raise ReadOnlyTensorValue(f"tensor {decl.name!r} is written by the program but its array is read-only")
    return array


def execute(
    program: program_pb2.Program,
    tensors: Mapping[str, np.ndarray],
    operators: Sequence[ValidatedOperator] | None = None,
) -> dict[str, np.ndarray]:
    """Run `program` over the bound `tensors`; return every tensor's array (scratch included).

    `operators` is `validate_program(program)` when the caller keeps it across calls; when None the
    program is validated here.
    """
    if operators is None:
        operators = validate_program(program)
    types: dict[str, TensorType] = {}
    roles: dict[str, int] = {}
    env: dict[str, np.ndarray] = {}
    for decl in program.tensors:
        types[decl.name] = declared_type(decl)
        roles[decl.name] = decl.role
        if decl.role != program_pb2.TENSOR_ROLE_SCRATCH:
            env[decl.name] = _bind(decl, tensors)
    for operator in operators:
        spec = OPERATORS[operator.op]
        arguments = [env[name] for name in operator.inputs]
        for out_index, in_index in spec.in_place:
            target = types[operator.outputs[out_index]].dtype
            if target not in FLOAT_DTYPES:  # an integer output in place (prompt_scores' ids): nothing to round
                continue
            for i, name in enumerate(operator.inputs):
                if i != in_index and types[name].dtype in FLOAT_DTYPES:
                    arguments[i] = round_to_dtype(arguments[i], target)
        results = REFERENCE_OPERATORS[operator.op](*arguments, **operator.attributes)
        if not isinstance(results, tuple):
            results = (results,)
        for name, result in zip(operator.outputs, results, strict=True):
            if name in env and result is env[name]:
                continue  # an in-place operator updated the bound array itself
            declared = types[name]
            value = round_to_dtype(np.asarray(result).reshape(declared.shape), declared.dtype)
            if roles[name] == program_pb2.TENSOR_ROLE_SCRATCH:
                env[name] = value
            else:
                env[name][...] = value
    return env
