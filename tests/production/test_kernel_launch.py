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


@pytest.mark.parametrize("setting", ["1", "2"])
def test_cpu_tensors_launch_without_it_whatever_the_setting(monkeypatch, setting):
    monkeypatch.setenv(launch.PDL_ENV, setting)
    assert launch.dependent(torch.zeros(4)) == {"PDL": 0, "launch_pdl": False}


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
                    reason="needs a Hopper GPU (programmatic dependent launch)")
@pytest.mark.parametrize("mode", [1, 2])
def test_dependent_modes_chain_one_row_products_that_read_their_predecessors_output(monkeypatch, mode):
    """Modes 1 and 2 on the GPU: a chain of one-row products, each reading the output the one before
    it just wrote, replayed in a CUDA graph, equals the products taken one at a time (a read of x
    before the predecessor's completion would see the buffer's previous contents, set to differ)."""
    from helios.production.kernels import linear

    monkeypatch.setenv(launch.PDL_ENV, str(mode))
    launch._device_mode.cache_clear()
    try:
        assert launch.dependent(torch.zeros(1, device="cuda")) == {"PDL": mode, "launch_pdl": True}
        torch.manual_seed(0)
        k, layers = 1024, 8
        ws = [torch.randn(k, k, device="cuda", dtype=torch.bfloat16) / 32 for _ in range(layers)]
        xs = [torch.randn(1, k, device="cuda", dtype=torch.bfloat16) for _ in range(layers + 1)]
        start = xs[0].clone()
        launches = [linear.linear_launch(xs[i], [ws[i]], [xs[i + 1]]) for i in range(layers)]
        for run in launches:  # compile outside the capture
            run()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for run in launches:
                run()
        expected = start.float()
        for w in ws:
            expected = (expected @ w.float().t()).to(torch.bfloat16).float()
        for _ in range(3):
            for x in xs[1:]:
                x.fill_(100.0)  # stale contents a premature read of x would use
            xs[0].copy_(start)
            graph.replay()
            torch.cuda.synchronize()
            torch.testing.assert_close(xs[-1].float(), expected, rtol=2e-2, atol=2e-2)
    finally:
        launch._device_mode.cache_clear()
