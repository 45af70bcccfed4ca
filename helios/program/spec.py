"""What an operator spec declares (host side): inputs, outputs, typed attributes, a shape rule.

An `OperatorSpec` is pure data plus one rule function. The rule receives the types of the present
inputs, the resolved attributes (defaults filled in; an optional attribute without default is
absent when unset) and the declared types of the outputs (None where the caller wants the rule to
infer them), and returns the type of every output. It raises `RuleError` with a plain sentence;
validation and the builder prefix the location.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from helios.program.errors import (
    AttributeTypeMismatch,
    InvalidAttributeValue,
    MissingAttribute,
    UnknownAttribute,
)
from helios.program.types import TensorType

ATTRIBUTE_KINDS = ("i", "f", "s", "b", "ints", "floats")  # the oneof members of program.proto's Attribute
AttributeValue = int | float | str | bool | tuple[int, ...] | tuple[float, ...]


class RuleError(Exception):
    """Raised by a shape rule; the caller turns it into a located HeliosError."""


Rule = Callable[[Sequence[TensorType], Mapping[str, AttributeValue], Sequence[TensorType | None]], Sequence[TensorType]]


@dataclass(frozen=True, slots=True)
class AttributeSpec:
    """One typed attribute. Required, defaulted, or optional (absent means "not set")."""

    name: str
    kind: str  # one of ATTRIBUTE_KINDS
    required: bool = False
    default: AttributeValue | None = None  # None with required=False: optional, absent when unset
    choices: tuple[str, ...] = ()  # allowed values of a string attribute; empty: any
    doc: str = ""
    # (retired spelling, choice) pairs: a program written before a rename reads as the new name.
    renamed: tuple[tuple[str, str], ...] = ()
    # The operator-set version that introduced the attribute: a program that sets it declares at
    # least this version (its default is what every older program means).
    since: int = 1

    def __post_init__(self) -> None:
        if self.kind not in ATTRIBUTE_KINDS:
            raise ValueError(f"attribute {self.name}: kind {self.kind!r} not in {ATTRIBUTE_KINDS}")
        if self.required and self.default is not None:
            raise ValueError(f"attribute {self.name}: a required attribute has no default")
        if self.choices and self.kind != "s":
            raise ValueError(f"attribute {self.name}: choices apply to string attributes only")
        for old, new in self.renamed:
            if old in self.choices or new not in self.choices:
                raise ValueError(f"attribute {self.name}: renamed {old!r} -> {new!r} must map a retired "
                                 f"spelling to one of its choices {list(self.choices)}")

    def coerce(self, value: object, where: str) -> AttributeValue:
        """The canonical Python value of `value` for this attribute (a retired spelling read as its new
        name), or AttributeTypeMismatch."""
        kind = self.kind
        ok = False
        result: AttributeValue
        if kind == "i":
            ok = isinstance(value, int) and not isinstance(value, bool)
            result = int(value) if ok else 0  # type: ignore[arg-type]
        elif kind == "f":
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            result = float(value) if ok else 0.0  # type: ignore[arg-type]
            if ok and not math.isfinite(result):
                raise InvalidAttributeValue(f"{where}: attribute {self.name} must be finite, got {value}")
        elif kind == "s":
            ok = isinstance(value, str)
            result = value if ok else ""  # type: ignore[assignment]
        elif kind == "b":
            ok = isinstance(value, bool)
            result = bool(value)
        elif kind == "ints":
            ok = isinstance(value, list | tuple) and all(
                isinstance(v, int) and not isinstance(v, bool) for v in value
            )
            result = tuple(int(v) for v in value) if ok else ()  # type: ignore[union-attr]
        else:  # floats
            ok = isinstance(value, list | tuple) and all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in value
            )
            result = tuple(float(v) for v in value) if ok else ()  # type: ignore[union-attr]
        if not ok:
            raise AttributeTypeMismatch(
                f"{where}: attribute {self.name} must be of kind {kind!r}, got {type(value).__name__} {value!r}"
            )
        for old, new in self.renamed:
            if result == old:
                result = new
        if self.choices and result not in self.choices:
            raise InvalidAttributeValue(
                f"{where}: attribute {self.name}={result!r} is not one of {list(self.choices)}"
            )
        return result


@dataclass(frozen=True, slots=True)
class OperatorSpec:
    """One operator of the set: its signature, attributes and shape-and-dtype rule."""

    name: str
    summary: str  # one line; docs/operators.md carries the full semantics
    inputs: tuple[str, ...]  # input names in order
    outputs: tuple[str, ...]  # output names in order
    rule: Rule
    attributes: tuple[AttributeSpec, ...] = ()
    optional_inputs: int = 0  # how many trailing inputs may be omitted
    in_place: tuple[tuple[int, int], ...] = ()  # (output index, input index): the output IS that input
    since: int = 1  # the operator-set version that introduced the operator
    attribute_map: Mapping[str, AttributeSpec] = field(init=False, repr=False, compare=False)
    updated_inputs: frozenset[str] = field(init=False, repr=False, compare=False)  # the in_place inputs' names

    def __post_init__(self) -> None:
        if not self.outputs:
            raise ValueError(f"operator {self.name}: at least one output")
        if not 0 <= self.optional_inputs <= len(self.inputs):
            raise ValueError(f"operator {self.name}: optional_inputs out of range")
        names = [a.name for a in self.attributes]
        if len(set(names)) != len(names):
            raise ValueError(f"operator {self.name}: duplicate attribute names")
        for out_index, in_index in self.in_place:
            if not (0 <= out_index < len(self.outputs) and 0 <= in_index < len(self.inputs)):
                raise ValueError(f"operator {self.name}: in_place pair out of range")
        if self.since < 1:
            raise ValueError(f"operator {self.name}: since must be >= 1")
        object.__setattr__(self, "attribute_map", {a.name: a for a in self.attributes})
        object.__setattr__(self, "updated_inputs", frozenset(self.inputs[i] for _, i in self.in_place))

    @property
    def min_inputs(self) -> int:
        return len(self.inputs) - self.optional_inputs

    def resolve_attributes(self, given: Mapping[str, object], where: str) -> dict[str, AttributeValue]:
        """Check `given` against the declared attributes and fill in defaults.

        Raises UnknownAttribute, MissingAttribute, AttributeTypeMismatch or InvalidAttributeValue.
        """
        for name in given:
            if name not in self.attribute_map:
                raise UnknownAttribute(
                    f"{where}: operator {self.name} has no attribute {name!r}; "
                    f"it declares {sorted(self.attribute_map) or 'none'}"
                )
        resolved: dict[str, AttributeValue] = {}
        for spec in self.attributes:
            if spec.name in given:
                resolved[spec.name] = spec.coerce(given[spec.name], where)
            elif spec.required:
                raise MissingAttribute(f"{where}: operator {self.name} requires attribute {spec.name!r}")
            elif spec.default is not None:
                resolved[spec.name] = spec.default
        return resolved
