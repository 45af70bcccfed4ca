"""`engram_gather` (operator-set version 7): its shape rule and version stamp."""

from __future__ import annotations

import pytest

from helios.program import OPERATOR_SET_VERSION, ProgramBuilder, validate_program
from helios.program import errors as E


def _builder() -> tuple[ProgramBuilder, str, str]:
    b = ProgramBuilder("g")
    return b, b.transport("staging", "staging", "f32", [2, 12, 4]), b.transport("index", "index", "i32", [6, 2])


def test_engram_gather_reads_the_leading_rows_and_stamps_version_7():
    b, staging, index = _builder()
    out = b.engram_gather(staging, index, packed_tokens=5, name="rows")
    assert b.type_of(out).shape == (5, 8)  # [P, O * W]
    program = b.build()
    assert program.operator_set_version == 7 <= OPERATOR_SET_VERSION
    program.operator_set_version = 6
    with pytest.raises(E.OperatorNewerThanProgram, match="engram_gather"):
        validate_program(program)
    b, staging, index = _builder()
    with pytest.raises(E.ShapeRuleViolation, match=r"packed_tokens 7 must be in \(0, 6\]"):
        b.engram_gather(staging, index, packed_tokens=7)
