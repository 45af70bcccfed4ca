"""Programmatic dependent launch: the mode's switch, and that no launch asks for it off a Hopper GPU."""

from __future__ import annotations

import pytest
import torch

from helios.production.kernels import launch


@pytest.mark.parametrize(("setting", "mode"), [("", launch.DEFAULT_MODE), ("0", 0), ("1", 1), ("2", 2), (" 2 ", 2)])
def test_the_setting_names_a_mode(monkeypatch, setting, mode):
    monkeypatch.setenv(launch.PDL_ENV, setting)
    assert launch.configured_mode() == mode


@pytest.mark.parametrize("setting", ["3", "on", "-1", "1.0"])
def test_a_setting_naming_no_mode_is_refused_naming_the_variable(monkeypatch, setting):
    monkeypatch.setenv(launch.PDL_ENV, setting)
    with pytest.raises(launch.InvalidLaunchMode, match=launch.PDL_ENV):
        launch.configured_mode()


def test_cpu_tensors_launch_without_it_whatever_the_setting(monkeypatch):
    monkeypatch.setenv(launch.PDL_ENV, "2")
    assert launch.dependent(torch.zeros(4)) == {"PDL": 0, "launch_pdl": False}
