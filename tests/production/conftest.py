"""Production tests: on a machine without CUDA the Triton kernels run in the interpreter.

`TRITON_INTERPRET=1` must be set before any `@triton.jit` decorator runs, so it is set here, before
any test module imports `helios.production.kernels`.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture(scope="module")
def cores(tiny_checkpoint):
    """`cores(family)` -> the family's tiny checkpoint prepared with `helpers.TINY_OPTIONS`, once per module."""
    from helios.ignition.prepare import prepare_checkpoint
    from tests.production.helpers import TINY_OPTIONS

    built = {}

    def core(family: str):
        if family not in built:
            built[family] = prepare_checkpoint(tiny_checkpoint(family), TINY_OPTIONS)
        return built[family]

    return core
