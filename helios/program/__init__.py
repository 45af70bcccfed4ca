"""The operator set (host side): operator specs, the versioned registry, program validation and
the builder ignition writes programs with. Shared by ignition and both runtimes; no torch here.
"""

from __future__ import annotations

from helios.program.builder import ProgramBuilder
from helios.program.errors import ProgramError
from helios.program.registry import (
    ACTIVATIONS,
    OPERATOR_SET_VERSION,
    OPERATORS,
    ROPE_TYPES,
    SAMPLING_PARAMETERS,
    SUPPORTED_OPERATOR_SET_VERSIONS,
)
from helios.program.spec import AttributeSpec, OperatorSpec
from helios.program.types import TensorType
from helios.program.validate import ValidatedOperator, validate_program

__all__ = [
    "ACTIVATIONS",
    "OPERATORS",
    "OPERATOR_SET_VERSION",
    "ROPE_TYPES",
    "SAMPLING_PARAMETERS",
    "SUPPORTED_OPERATOR_SET_VERSIONS",
    "AttributeSpec",
    "OperatorSpec",
    "ProgramBuilder",
    "ProgramError",
    "TensorType",
    "ValidatedOperator",
    "validate_program",
]
