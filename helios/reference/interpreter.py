"""The reference program interpreter (host side): executes a `program_pb2.Program` with NumPy.

    execute(program, tensors) -> dict of every tensor's array
    execute_ranks(programs, tensors_per_rank) -> each rank's dict (a tensor-parallel graph, in lockstep)

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
from helios.reference.collectives import RANK_COLLECTIVES
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


class RankProgramsDiffer(HeliosError):
    """The programs of the ranks of one graph cannot run in lockstep (operators or collectives differ)."""


class _Run:
    """One program's execution state: its declared types and roles and the arrays bound so far."""

    def __init__(self, program: program_pb2.Program, tensors: Mapping[str, np.ndarray]) -> None:
        self.types: dict[str, TensorType] = {}
        self.roles: dict[str, int] = {}
        self.env: dict[str, np.ndarray] = {}
        for decl in program.tensors:
            self.types[decl.name] = declared_type(decl)
            self.roles[decl.name] = decl.role
            if decl.role != program_pb2.TENSOR_ROLE_SCRATCH:
                self.env[decl.name] = _bind(decl, tensors)

    def arguments(self, operator: ValidatedOperator) -> list[np.ndarray]:
        spec = OPERATORS[operator.op]
        arguments = [self.env[name] for name in operator.inputs]
        for out_index, in_index in spec.in_place:
            target = self.types[operator.outputs[out_index]].dtype
            if target not in FLOAT_DTYPES:  # an integer output in place (prompt_scores' ids): nothing to round
                continue
            for i, name in enumerate(operator.inputs):
                if i != in_index and self.types[name].dtype in FLOAT_DTYPES:
                    arguments[i] = round_to_dtype(arguments[i], target)
        return arguments

    def store(self, operator: ValidatedOperator, results: object) -> None:
        if not isinstance(results, tuple):
            results = (results,)
        env = self.env
        for name, result in zip(operator.outputs, results, strict=True):
            if name in env and result is env[name]:
                continue  # an in-place operator updated the bound array itself
            declared = self.types[name]
            value = round_to_dtype(np.asarray(result).reshape(declared.shape), declared.dtype)
            if self.roles[name] == program_pb2.TENSOR_ROLE_SCRATCH:
                env[name] = value
            else:
                env[name][...] = value


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
    run = _Run(program, tensors)
    for operator in operators:
        run.store(operator, REFERENCE_OPERATORS[operator.op](*run.arguments(operator), **operator.attributes))
    return run.env


def execute_ranks(
    programs: Sequence[program_pb2.Program],
    tensors: Sequence[Mapping[str, np.ndarray]],
    operators: Sequence[Sequence[ValidatedOperator]] | None = None,
) -> list[dict[str, np.ndarray]]:
    """Run the programs of the ranks of one graph in lockstep (rank r over `tensors[r]`); return each
    rank's tensors.

    Operator i runs on every rank, in rank order, before operator i + 1; a collective
    (`helios.reference.collectives`) takes every rank's input at once and gives each rank its output.
    """
    if len(tensors) != len(programs):
        raise RankProgramsDiffer(f"{len(programs)} rank programs were given {len(tensors)} tensor sets")
    if operators is None:
        operators = [validate_program(program) for program in programs]
    check_lockstep(programs, operators)
    runs = [_Run(program, bound) for program, bound in zip(programs, tensors, strict=True)]
    for step in zip(*operators, strict=True):
        collective = RANK_COLLECTIVES.get(step[0].op)
        if collective is not None:
            inputs = [run.arguments(operator)[0] for run, operator in zip(runs, step, strict=True)]
            for run, operator, result in zip(runs, step, collective(inputs, **step[0].attributes), strict=True):
                run.store(operator, result)
            continue
        for run, operator in zip(runs, step, strict=True):
            run.store(operator, REFERENCE_OPERATORS[operator.op](*run.arguments(operator), **operator.attributes))
    return [run.env for run in runs]


def check_lockstep(programs: Sequence[program_pb2.Program],
                   operators: Sequence[Sequence[ValidatedOperator]]) -> None:
    """The ranks' programs of one graph run the same operators in order, each collective over all of
    them with the same attributes (RankProgramsDiffer otherwise)."""
    graph = programs[0].graph if programs else ""
    for rank, (program, ops) in enumerate(zip(programs, operators, strict=True)):
        if program.graph != graph or program.rank != rank:
            raise RankProgramsDiffer(f"program {rank} of graph {graph!r} is rank {program.rank} of "
                                     f"{program.graph!r}")
        if [o.op for o in ops] != [o.op for o in operators[0]]:
            raise RankProgramsDiffer(f"graph {graph!r}: rank {rank}'s operators differ from rank 0's")
    for i, first in enumerate(operators[0] if operators else ()):
        if first.op not in RANK_COLLECTIVES:
            continue
        if first.attributes.get("ranks") != len(programs):
            raise RankProgramsDiffer(f"graph {graph!r} operators[{i}] ({first.op}) is over "
                                     f"{first.attributes.get('ranks')} ranks, the core has {len(programs)}")
        if any(ops[i].attributes != first.attributes for ops in operators):
            raise RankProgramsDiffer(f"graph {graph!r} operators[{i}] ({first.op}): the ranks' attributes differ")
