"""Errors of the operator set and program validation (host side).

One class per violated invariant. Every message names where the problem is (`tensors[i]` or
`operators[i]`, the operator and the tensor) and what was expected.
"""

from __future__ import annotations

from helios.errors import HeliosError


class ProgramError(HeliosError):
    """A captured program breaks a rule of the operator set."""


class UnsupportedOperatorSetVersion(ProgramError):
    """The program declares an operator-set version this engine does not implement."""


class OperatorNewerThanProgram(ProgramError):
    """An operator was introduced by a later operator-set version than the one the program declares."""


class DuplicateTensor(ProgramError):
    """Two tensor declarations share one name."""


class UnspecifiedTensorRole(ProgramError):
    """A tensor declaration has no role (the zero enum value selects nothing)."""


class UnspecifiedTensorDType(ProgramError):
    """A tensor declaration has no dtype (the zero enum value selects nothing)."""


class NonStaticExtent(ProgramError):
    """A tensor extent is zero where only a load-sized cache plane may have one."""


class TensorBindingMissing(ProgramError):
    """A tensor lacks the buffer or resource its role requires, or names one its role forbids."""


class UnknownOperator(ProgramError):
    """An operator name is not in the program's operator-set version."""


class UnknownAttribute(ProgramError):
    """An operator carries an attribute its spec does not declare."""


class MissingAttribute(ProgramError):
    """A required attribute is absent."""


class AttributeTypeMismatch(ProgramError):
    """An attribute holds a value of the wrong kind (int, float, string, bool, int list, float list)."""


class InvalidAttributeValue(ProgramError):
    """An attribute has the right kind but a value outside its allowed set or range."""


class UnsortedAttributes(ProgramError):
    """Attributes are not sorted by name, or a name repeats."""


class OperatorArity(ProgramError):
    """An operator has the wrong number of inputs or outputs."""


class UndeclaredTensor(ProgramError):
    """An operator names a tensor that is not declared."""


class ShapeRuleViolation(ProgramError):
    """An operator's inputs break its shape-and-dtype rule."""


class OutputTypeMismatch(ProgramError):
    """A declared output's shape or dtype differs from what the operator's rule produces."""


class InPlaceMismatch(ProgramError):
    """An in-place operator's output is not the very tensor it updates."""


class ReadBeforeWrite(ProgramError):
    """A SCRATCH or COMPLETION tensor is read before any operator writes it."""


class ReadOnlyTensorWritten(ProgramError):
    """An operator writes a WEIGHT, TRANSPORT or TUNED tensor."""


class UnknownBuffer(ProgramError):
    """A tensor names a buffer the execution manifest does not declare."""


class BufferMismatch(ProgramError):
    """A tensor's role, dtype or shape disagrees with the manifest buffer it binds."""
