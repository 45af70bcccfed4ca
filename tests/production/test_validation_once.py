"""Each completion row of the production executor (Triton kernels; interpreted on a CPU) is
validated exactly once per round, by the one validator (see tests/engine/test_validation_once.py)."""

from __future__ import annotations

import pytest

from helios.ignition.prepare import prepare_checkpoint
from helios.production.loading import load_native_model, runtime_for
from helios.runtime.limits import AdmissionLimits
from helios.runtime.options import RuntimeOptions
from tests.engine.test_batching_runtime import OPTIONS
from tests.engine.test_validation_once import assert_once, count_validations
from tests.production.helpers import DEVICE


@pytest.mark.slow
def test_the_production_executor_rows_are_validated_once(tiny_checkpoint, monkeypatch):
    core = prepare_checkpoint(tiny_checkpoint("qwen3"), OPTIONS)
    model = load_native_model(core, device=str(DEVICE), pages=24)
    runtime = runtime_for(model, RuntimeOptions(AdmissionLimits(max_active=2, queue_capacity=4)))
    assert_once(*count_validations(monkeypatch, runtime))
