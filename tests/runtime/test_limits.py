"""Admission limits: core defaults fill what startup options leave out; startup options win."""

from __future__ import annotations

import pytest

from helios.proto import contract_pb2
from helios.runtime.limits import AdmissionLimits, InvalidLimits, resolve_limits


def test_startup_options_win_over_core_defaults() -> None:
    defaults = contract_pb2.ServingDefaults(max_active=4, queue_capacity=10, frontend_workers=3)
    limits = resolve_limits(defaults, max_active=2)
    assert limits == AdmissionLimits(max_active=2, queue_capacity=10, frontend_workers=3)
    assert limits.http_capacity == 12
    assert resolve_limits(None) == AdmissionLimits()
    assert resolve_limits(contract_pb2.ServingDefaults(event_capacity=9)).event_capacity == 9


def test_max_concurrency_caps_max_active() -> None:
    assert resolve_limits(contract_pb2.ServingDefaults(max_active=16), max_concurrency=4).max_active == 4
    with pytest.raises(InvalidLimits, match="request slots"):
        resolve_limits(None, max_active=8, max_concurrency=4)


def test_invalid_limits() -> None:
    with pytest.raises(InvalidLimits, match="max_active"):
        AdmissionLimits(max_active=0)
    with pytest.raises(InvalidLimits, match="queue_capacity"):
        resolve_limits(None, queue_capacity=-1)
