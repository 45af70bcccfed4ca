"""`helios serve` options that only the production runtime takes: refused with one line elsewhere,
passed through to the loader otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from helios.cli.compose import ServeOptions
from helios.errors import HeliosError


def test_gpu_memory_fraction_needs_the_production_runtime_and_a_share():
    with pytest.raises(HeliosError, match="--runtime production"):
        ServeOptions(core=Path("m.hcore"), accept="a/b", trust=("k.pub",), gpu_memory_fraction=0.5)
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(HeliosError, match=r"\(0, 1\]"):
            ServeOptions(core=Path("m.hcore"), accept="a/b", trust=("k.pub",), runtime="production",
                         gpu_memory_fraction=bad)
    ServeOptions(core=Path("m.hcore"), accept="a/b", trust=("k.pub",), runtime="production", gpu_memory_fraction=1.0)


def test_gpu_memory_fraction_reaches_the_production_loader(tiny_checkpoint, tmp_path, monkeypatch):
    from helios.cli import main
    from helios.cli.compose import load_state
    from helios.production import loading as production

    key, core = tmp_path / "k.key", tmp_path / "m.hcore"
    assert main(["keys", "new", "--out", str(key)]) == 0
    assert main(["prepare", str(tiny_checkpoint("llama")), "--out", str(core), "--publisher", "acme/tests",
                 "--key", str(key), "--dtype", "fp32", "--batch-capacities", "1", "--prefill-capacities", "8"]) == 0
    seen = {}

    real = production.load_native_model

    def loader(opened, **load):
        seen.update({k: v for k, v in load.items() if v is not None})
        return real(opened, **{**load, "device": "cpu"})

    monkeypatch.setattr(production, "load_native_model", loader)
    _, opened = load_state(ServeOptions(core=core, accept="acme/tests", trust=(f"{key}.pub",), runtime="production",
                                        gpu_memory_fraction=0.4))
    opened.close()
    assert seen == {"max_concurrency": 1, "gpu_memory_fraction": 0.4, "history_drafting": False, "measure_costs": False}


def test_host_cache_gib_is_a_production_option_of_at_least_zero():
    base = {"core": Path("m.hcore"), "accept": "a/b", "trust": ("k.pub",)}
    with pytest.raises(HeliosError, match="--host-cache-gib .*--runtime production"):
        ServeOptions(**base, host_cache_gib=1.0)
    ServeOptions(**base, host_cache_gib=0.0)  # disabling it is fine anywhere
    with pytest.raises(HeliosError, match="--host-cache-gib must be >= 0"):
        ServeOptions(**base, runtime="production", host_cache_gib=-1.0)
    ServeOptions(**base, runtime="production", host_cache_gib=2.5)
