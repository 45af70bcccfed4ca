"""The lowering's small matrix products on the Triton kernels (CPU tests inject the Triton policy;
fp32 in the interpreter): fused q/k/v and gate/up/activation launches, logits over the sampled ids,
the same rounds and greedy tokens as the torch lowering and as the reference engine."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.production.buffers import ScratchArena
from helios.production.lowering import lower_program
from helios.production.native_model import LoadOptions, NativeModel
from helios.production.tuning import FixedPolicy
from helios.program import validate_program
from helios.proto import program_pb2
from helios.reference.engine import ReferenceEngine
from helios.runtime.packing import LaneInput
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.production.helpers import DEVICE

PROMPT = (5, 17, 99, 200, 33, 1, 2, 3, 4, 5, 6, 7, 81, 82, 83, 120, 121, 9, 250)
OPTIONS = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1, 2), prefill_capacities=(8, 16),
                             context_tokens=64)
PAGES = 16


@pytest.fixture(scope="module")
def cores(tiny_checkpoint):
    built = {}

    def core(family: str):
        if family not in built:
            built[family] = prepare_checkpoint(tiny_checkpoint(family), OPTIONS)
        return built[family]

    return core


def _program(core, name: str):
    handle = next(h for h in core.manifest.graphs if h.name == name)
    program = program_pb2.Program.FromString(core.read(handle.program_resources[0]))
    return program, validate_program(program, core.manifest.buffers)


def _layers(program) -> int:
    return sum(1 for op in program.operators if op.op == "paged_attention")


@pytest.mark.parametrize("family", ["qwen3", "qwen2"])
def test_greedy_tokens_on_the_triton_products_equal_the_reference_engine(cores, family):
    """qwen2 carries q/k/v biases: the fused multi-output launch adds each group's own bias."""
    core = cores(family)
    reference = ReferenceEngine.load(core, pages=PAGES)
    driven = ReferenceEngine.load(core, pages=PAGES)
    native = NativeModel.load(core, LoadOptions(device=str(DEVICE), pages=PAGES, linear="triton"))
    driven.run_round = native.run_round
    request = GenerationRequest(PROMPT, max_tokens=4, sampling=SamplingParams(temperature=0.0), ignore_eos=True)
    assert list(driven.generate(request)) == list(reference.generate(request))
    decode = native.graphs["decode_b1"].plan.kernels
    assert decode.count("matmul*3") == decode.count("gate_up+activation") == _layers(_program(core, "decode_b1")[0])
    # every decided shape is reported, on the Triton path, untimed
    fusions = {d.shape.fusion for d in native.linear_decisions}
    assert {"matmul", "matmul*3", "gate_up+activation", "logits"} <= fusions
    assert all(d.path == "triton" and d.triton_us is None for d in native.linear_decisions)


def test_fused_products_save_four_launches_a_layer(cores):
    core = cores("qwen3")
    program, operators = _program(core, "decode_b1")
    native = NativeModel.load(core, LoadOptions(device=str(DEVICE), pages=PAGES))
    weights = _weights(native, program)
    plans = {path: lower_program(program, operators, weights=weights, buffers=native.executor.buffers,
                                 arena=ScratchArena(DEVICE), device=DEVICE, linear_policy=FixedPolicy(path))
             for path in ("torch", "triton")}
    layers = _layers(program)
    # q/k/v: three launches become one; gate, up and the activation: three become one
    assert len(plans["torch"].launches) - len(plans["triton"].launches) == 4 * layers
    assert "matmul*3" not in plans["torch"].kernels and "gate_up+activation" not in plans["torch"].kernels
    fused = next(launch for launch in plans["triton"].launches if launch.kernel == "gate_up+activation")
    assert [operators[i].op for i in fused.operators] == ["matmul", "matmul", "gated_activation"]


@pytest.mark.parametrize("graph", ["decode_b2", "prefill_p16"])
def test_triton_and_torch_plans_compute_the_same_round(cores, graph):
    """The same packed round through the torch plan, the Triton plan and the unfused Triton plan:
    caches and sampled ids agree (16 packed rows is the largest the kernels take)."""
    core = cores("qwen3")
    native = NativeModel.load(core, LoadOptions(device=str(DEVICE), pages=PAGES))
    program, operators = _program(core, graph)
    executor = native.executor
    if graph.startswith("prefill"):
        lanes = [_lane(0, PROMPT[:16])]
    else:
        executor.run_round("prefill_p16", [_lane(0, PROMPT[:16])])
        executor.run_round("prefill_p16", [_lane(1, PROMPT[3:19])])
        lanes = [_lane(0, (PROMPT[16],), consumed=16), _lane(1, (PROMPT[2],), consumed=16)]
    executor._pack(native.graphs[graph], lanes)
    start = {n: t.detach().clone() for n, t in executor.buffers.items()}
    weights = _weights(native, program)
    results = {}
    for name, path, fuse in (("torch", "torch", True), ("triton", "triton", True), ("unfused", "triton", False)):
        for buffer, tensor in executor.buffers.items():
            tensor.copy_(start[buffer])
        plan = lower_program(program, operators, weights=weights, buffers=executor.buffers,
                             arena=ScratchArena(DEVICE), device=DEVICE, fuse=fuse, linear_policy=FixedPolicy(path))
        plan.run()
        results[name] = {n: t.detach().clone() for n, t in executor.buffers.items()}
    changed = [n for n in start if not torch.equal(start[n], results["torch"][n])]
    # logits are scratch: they reach the buffers as the sampled ids; caches carry every layer's k and v
    assert "completion.sampled_ids" in changed and sum(".key" in n or ".value" in n for n in changed) >= 2
    for name in ("triton", "unfused"):
        for buffer in start:
            np.testing.assert_allclose(results[name][buffer].float().cpu().numpy(),
                                       results["torch"][buffer].float().cpu().numpy(),
                                       rtol=1e-5, atol=1e-5, err_msg=f"{name}: {buffer}")
        assert torch.equal(results[name]["completion.sampled_ids"], results["torch"]["completion.sampled_ids"])


def _lane(slot: int, tokens: tuple[int, ...], consumed: int = 0) -> LaneInput:
    return LaneInput(slot=slot, generation=1, consumed=consumed, tokens=tokens, prompt_tokens_in_round=len(tokens),
                     samples=True, page_ids=tuple(range(8 * slot, 8 * slot + 8)), seed=5,
                     sampling=SamplingParams(temperature=0.0), output_limit=8, eos_ids=(1,),
                     prompt_token_ids=tokens)


def _weights(native, program):
    plan = native.graphs["prefill_p16"].plan
    return {d.resource: plan.tensors[d.name] for d in program.tensors if d.role == program_pb2.TENSOR_ROLE_WEIGHT}
