"""The production executor under the host engine's batching scheduler on CPU (Triton kernels
interpreted): its tokens equal the reference's, under page pressure, and `helios generate
--runtime production` prints what `--runtime reference` prints."""

from __future__ import annotations

import pytest

from helios.ignition.prepare import prepare_checkpoint
from helios.reference.engine import ReferenceEngine
from helios.runtime.interface import PreparedRequest
from helios.runtime.limits import AdmissionLimits
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.engine.test_batching_runtime import OPTIONS, serve


@pytest.fixture(scope="module")
def core(tiny_checkpoint):
    return prepare_checkpoint(tiny_checkpoint("qwen3"), OPTIONS)


@pytest.mark.slow
def test_helios_generate_production_equals_reference(tiny_checkpoint, tmp_path, capsys):
    """`helios generate --runtime production` (the production executor; interpreted on a CPU) prints
    what `--runtime reference` prints."""
    import json

    from helios.cli import main

    key = tmp_path / "publisher.key"
    assert main(["keys", "new", "--out", str(key)]) == 0
    core = tmp_path / "model.hcore"
    assert main(["prepare", str(tiny_checkpoint("qwen3")), "--out", str(core), "--publisher", "acme/tests",
                 "--key", str(key), "--dtype", "fp32", "--page-tokens", "4", "--batch-capacities", "1,2",
                 "--prefill-capacities", "8,16", "--context-tokens", "64"]) == 0
    capsys.readouterr()
    outputs = {}
    for name in ("reference", "production"):
        assert main(["generate", str(core), "--accept", "acme/tests", "--trust", f"{key}.pub", "--prompt", "fox",
                     "--max-tokens", "3", "--temperature", "0", "--json", "--runtime", name]) == 0
        outputs[name] = json.loads(capsys.readouterr().out)
    assert outputs["production"] == outputs["reference"]


@pytest.mark.slow
def test_the_production_executor_under_the_batching_scheduler(core):
    """The production executor (Triton kernels, interpreted on a CPU) under page pressure."""
    from helios.production.loading import load_native_model, runtime_for
    from helios.runtime.options import RuntimeOptions

    # Both reach 12 positions (3 pages) in a 5-page cache; the younger takes its third page first, so
    # the older one preempts it when it needs its own third page; the younger is readmitted.
    greedy = SamplingParams(temperature=0.0)
    requests = [GenerationRequest(tuple(range(3)), max_tokens=10, sampling=greedy, ignore_eos=True),
                GenerationRequest(tuple(range(20, 26)), max_tokens=7, sampling=greedy, ignore_eos=True)]
    reference = ReferenceEngine.load(core, pages=16)
    expected = [list(reference.generate(r)) for r in requests]
    model = load_native_model(core, pages=5)
    rt = runtime_for(model, RuntimeOptions(AdmissionLimits(max_active=2, queue_capacity=4)))
    results = serve(rt, [PreparedRequest(f"r{i}", r, observe_tokens=True) for i, r in enumerate(requests)])
    assert [r.tokens for r in results] == expected
    assert rt.scheduler.counters.preemptions >= 1
    # The younger's endpoint is mid-page: snapshotted, released, restored; nothing recomputed.
    metrics = rt.metrics()
    assert metrics.snapshots_restored >= 1 and metrics.recomputed_tokens == 0
