"""The lowering's small matrix products on the Triton kernels (CPU tests inject the Triton policy;
fp32 in the interpreter): fused q/k/v and gate/up/activation launches, logits over the sampled ids,
the same rounds and greedy tokens as the torch lowering and as the reference engine."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helios.production.buffers import ScratchArena
from helios.production.lowering import linear as linear_lowering
from helios.production.lowering import lower_program
from helios.production.lowering.product_choice import FixedPolicy
from helios.production.native_model import LoadOptions, NativeModel
from helios.program import validate_program
from helios.proto import program_pb2
from helios.reference.engine import ReferenceEngine
from helios.runtime.packing import LaneInput
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.production.helpers import DEVICE, GPU, PAGES, PROMPT


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
    driven.executor = native.executor
    request = GenerationRequest(PROMPT, max_tokens=4, sampling=SamplingParams(temperature=0.0), ignore_eos=True)
    assert list(driven.generate(request)) == list(reference.generate(request))
    decode = native.graphs["decode_b1"].plan.kernels
    layers = _layers(_program(core, "decode_b1")[0])
    assert _ending(decode, "matmul*3") == _ending(decode, "gate_up+activation") == layers
    # each layer's two norms run in the prologue of the products reading them
    assert _starting(decode, linear_lowering.NORM_PREFIXES) == 2 * layers
    # every decided shape is reported, on the Triton path, untimed
    fusions = {d.shape.fusion for d in native.linear_decisions}
    assert {"matmul", "matmul*3", "gate_up+activation", "logits"} <= fusions
    assert all(d.path == "triton" and d.triton_us is None for d in native.linear_decisions)


def _ending(kernels, fusion: str) -> int:
    return sum(1 for kernel in kernels if kernel.endswith(fusion))


def _starting(kernels, prefixes) -> int:
    return sum(1 for kernel in kernels if kernel.startswith(prefixes))


def test_fused_products_save_six_launches_a_layer(cores):
    core = cores("qwen3")
    program, operators = _program(core, "decode_b1")
    native = NativeModel.load(core, LoadOptions(device=str(DEVICE), pages=PAGES))
    weights = _weights(native, program)
    plans = {path: lower_program(program, operators, weights=weights, buffers=native.executor.buffers,
                                 arena=ScratchArena(DEVICE), device=DEVICE, linear_policy=FixedPolicy(path))
             for path in ("torch", "triton")}
    layers = _layers(program)
    # q/k/v: three launches become one; gate, up and the activation: three become one; the layer's
    # two norms (the first layer's without its residual add) join the products reading them
    assert len(plans["torch"].launches) - len(plans["triton"].launches) == 6 * layers
    assert _ending(plans["torch"].kernels, "matmul*3") == _ending(plans["torch"].kernels, "gate_up+activation") == 0
    assert _starting(plans["torch"].kernels, linear_lowering.NORM_PREFIXES) == 0
    fused = [launch for launch in plans["triton"].launches if launch.kernel.endswith("gate_up+activation")]
    assert len(fused) == layers and all(launch.kernel == "add+rms_norm+gate_up+activation" for launch in fused)
    assert [operators[i].op for i in fused[0].operators] == ["add", "rms_norm", "matmul", "matmul", "gated_activation"]
    first = next(launch for launch in plans["triton"].launches if launch.kernel.endswith("matmul*3"))
    assert first.kernel == "rms_norm+matmul*3"  # the embedding's rows: no residual yet


def test_a_norm_prologue_timed_slower_leaves_the_norm_kernel_before_the_fused_products(cores):
    """The policy's decision for a norm-prologue shape is honoured: "torch" (the norm kernel, then
    the product launch) keeps the add+rms_norm kernel and the products' own fusions; the rounds agree."""
    from helios.production.lowering.product_choice import NORM_FUSIONS, Decision, LinearPolicy

    class NormsApart(LinearPolicy):
        def _decide(self, shape, candidates):
            fused, unfused = candidates()  # both candidates build over the lowering's operands
            assert callable(fused) and callable(unfused)
            return Decision(shape, "torch" if shape.fusion in NORM_FUSIONS else "triton")

    core = cores("qwen3")
    program, operators = _program(core, "decode_b1")
    native = NativeModel.load(core, LoadOptions(device=str(DEVICE), pages=PAGES))
    weights = _weights(native, program)
    apart = lower_program(program, operators, weights=weights, buffers=native.executor.buffers,
                          arena=ScratchArena(DEVICE), device=DEVICE, linear_policy=NormsApart())
    layers = _layers(program)
    assert _starting(apart.kernels, linear_lowering.NORM_PREFIXES) == 0
    assert apart.kernels.count("matmul*3") == apart.kernels.count("gate_up+activation") == layers
    assert apart.kernels.count("add+rms_norm") == 2 * layers - 1  # the first layer's norm has no add


# timing runs candidates over whatever the unrun plan's scratch holds: NaN products are expected
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_a_deferred_measured_policy_times_every_product_after_the_warm_lowering(cores):
    """NativeModel's sequence on a GPU, with a wall-clock timer on the CPU: the warm lowering takes
    Triton provisionally, measure_pending builds and times both candidates of every shape after that
    lowering is done (its scratch inputs are released by then), the final lowering follows the decisions."""
    import time

    from helios.production.lowering.product_choice import MeasuredPolicy, forget_measurements

    core = cores("qwen3")
    program, operators = _program(core, "decode_b1")
    native = NativeModel.load(core, LoadOptions(device=str(DEVICE), pages=PAGES))
    weights = _weights(native, program)
    timed = []

    def timer(run) -> float:
        start = time.perf_counter()
        run()
        timed.append(time.perf_counter() - start)
        return timed[-1]

    def lower():
        return lower_program(program, operators, weights=weights, buffers=native.executor.buffers,
                             arena=ScratchArena(DEVICE), device=DEVICE, linear_policy=policy)
    forget_measurements()
    policy = MeasuredPolicy(timer, key="deferred-lowering-test", deferred=True)
    warm = lower()
    assert _ending(warm.kernels, "matmul*3") and _ending(warm.kernels, "gate_up+activation") and policy.decisions == ()
    policy.measure_pending()
    decisions = {d.shape.fusion: d for d in policy.decisions}
    # the products, and the layers' norms in the prologue of the products reading them (timed too)
    assert set(decisions) == {"matmul", "matmul*3", "gate_up+activation", "logits", "rms_norm+matmul*3",
                              "add+rms_norm+matmul*3", "add+rms_norm+gate_up+activation"}
    assert len(timed) == 2 * len(policy.decisions)
    assert all(d.triton_us is not None and d.torch_us is not None for d in policy.decisions)
    final = lower()
    for fusion in ("matmul*3", "gate_up+activation"):
        assert bool(_ending(final.kernels, fusion)) == (decisions[fusion].path == "triton")
    for fusion in ("rms_norm+matmul*3", "add+rms_norm+matmul*3", "add+rms_norm+gate_up+activation"):
        product = fusion.split("rms_norm+", 1)[1]
        assert (fusion in final.kernels) == (decisions[fusion].path == decisions[product].path == "triton")
    final.run()
    forget_measurements()


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


# ------------------------------------------------------------------------ synthetic programs

HIDDEN, FFN, VOCAB = 40, 24, 48


def _mlp_program(variant: str, dtype: str, rows: int):
    """x [rows, HIDDEN] -> gate/up matmuls -> gated_activation -> out, in one of several variants."""
    from helios.program.builder import ProgramBuilder

    b = ProgramBuilder(f"mlp_{variant}")
    x = b.state("x", buffer="x", dtype=dtype, shape=[rows, HIDDEN])
    out = b.state("out", buffer="out", dtype=dtype, shape=[rows, FFN])
    wg = b.weight("wg", "wg", dtype, [FFN, HIDDEN])
    wu = b.weight("wu", "wu", dtype, [FFN, HIDDEN])
    bias = b.weight("bias", "bias", dtype, [FFN])
    gate = b.matmul(x, wg, bias if variant == "one_bias" else None, name="gate")
    up = b.matmul(x, wu, name="up")
    if variant == "swapped":
        b.gated_activation(up, gate, activation="gelu_tanh", into=out)
    else:
        b.gated_activation(gate, up, activation="silu", into=out)
    if variant == "gate_read_again":
        again = b.state("again", buffer="again", dtype=dtype, shape=[rows, FFN])
        b.add(gate, out, into=again)
    return b.build()


def _run_synthetic(program, dtype: str, path: str, values: dict[str, np.ndarray]):
    from helios.reference.interpreter import execute

    torch_dtype = {"f32": torch.float32, "f16": torch.float16}[dtype]
    decls = {d.name: d for d in program.tensors}
    weights = {d.resource: torch.from_numpy(values[d.name]).to(DEVICE, torch_dtype) for d in program.tensors
               if d.role == program_pb2.TENSOR_ROLE_WEIGHT}
    buffers = {name: torch.from_numpy(values[name]).to(DEVICE, torch_dtype) for name in values
               if name in decls and decls[name].role == program_pb2.TENSOR_ROLE_STATE}
    operators = validate_program(program)
    plan = lower_program(program, operators, weights=weights, buffers=buffers, arena=ScratchArena(DEVICE),
                         device=DEVICE, linear_policy=FixedPolicy(path))
    plan.run()
    expected = execute(program, {k: v.copy() for k, v in values.items()}, operators)
    return plan, buffers, expected


def _values(program, dtype: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng()
    numpy_dtype = {"f32": np.float32, "f16": np.float16}[dtype]
    return {d.name: (rng.standard_normal([int(e) for e in d.shape]) * 0.5).astype(numpy_dtype)
            for d in program.tensors if d.role != program_pb2.TENSOR_ROLE_SCRATCH}


@pytest.mark.parametrize(("variant", "triton_kernels"), [
    ("plain", ("gate_up+activation",)),
    ("swapped", ("gate_up+activation",)),  # the activation reads up first: up is the gate
    ("gate_read_again", ("matmul*2", "gated_activation", "add")),  # gate must be stored
    ("one_bias", ("matmul", "matmul", "gated_activation")),  # biases differ: no fusion at all
])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_matmul_fusions_follow_the_program_and_keep_its_values(variant, triton_kernels, dtype):
    """f16 runs the rounding points for real: the fused gate/up round to f16 before the activation
    as the reference interpreter rounds each matmul's output."""
    program = _mlp_program(variant, dtype, rows=3)
    values = _values(program, dtype)
    for path, kernels in (("triton", triton_kernels), ("torch", None)):
        plan, buffers, expected = _run_synthetic(program, dtype, path, values)
        if kernels is not None:
            assert plan.kernels == kernels
        else:
            assert not any(k.startswith(("matmul*", "gate_up")) for k in plan.kernels)
        tolerance = 1e-5 if dtype == "f32" else 2e-3
        for name in buffers:
            np.testing.assert_allclose(buffers[name].float().cpu().numpy(), expected[name].astype(np.float32),
                                       rtol=tolerance, atol=tolerance, err_msg=f"{variant}/{path}: {name}")


@pytest.mark.parametrize("variant", ["plain", "swapped", "gate_read_again"])
def test_more_than_sixteen_rows_stay_on_torch_their_groups_on_streams(variant):
    """Past the GEMVs' 16 rows the products run on torch; a group of them runs side by side on
    streams where the policy says so (on a CPU, which has no streams, one after another), storing
    gate and up, which the activation then reads."""
    program = _mlp_program(variant, "f32", rows=17)
    values = _values(program, "f32")
    expected_kernels = {"plain": ("streams:gate_up+activation",), "swapped": ("streams:gate_up+activation",),
                        "gate_read_again": ("streams:matmul*2", "gated_activation", "add")}[variant]
    for path, kernels in (("triton", expected_kernels), ("torch", None)):
        plan, buffers, expected = _run_synthetic(program, "f32", path, values)
        if kernels is not None:
            assert plan.kernels == kernels
        else:
            assert not any(k.startswith(("streams:", "matmul*", "gate_up")) for k in plan.kernels)
        for name in buffers:
            np.testing.assert_allclose(buffers[name].cpu().numpy(), expected[name], rtol=1e-5, atol=1e-5,
                                       err_msg=f"{variant}/{path}: {name}")


def test_q_k_and_v_past_sixteen_rows_run_on_streams_and_keep_their_values():
    program = _qkv_program(17, HIDDEN, (32, 8, 8), "f32")
    plan, buffers, expected = _run_synthetic(program, "f32", "triton", _values(program, "f32"))
    assert plan.kernels[0] == "streams:matmul*3"
    for name in buffers:
        np.testing.assert_allclose(buffers[name].cpu().numpy(), expected[name], rtol=1e-5, atol=1e-5, err_msg=name)


def test_a_group_on_streams_is_timed_against_its_products_one_after_another():
    """The policy's candidates for a group on streams run over fresh outputs of their own (the plan's
    are untouched); a "torch" decision keeps the products apart, and is reported as "serial"."""
    from helios.production.lowering.product_choice import STREAM_FUSIONS, Decision, LinearPolicy

    built = {}

    class Serial(LinearPolicy):
        def _decide(self, shape, candidates):
            if shape.fusion in STREAM_FUSIONS:
                built[shape.fusion] = candidates()
                return Decision(shape, "torch", 2.0, 1.0)
            return Decision(shape, "triton")

    program = _mlp_program("plain", "f32", rows=17)
    values = _values(program, "f32")
    weights = {d.resource: torch.from_numpy(values[d.name]).to(DEVICE) for d in program.tensors
               if d.role == program_pb2.TENSOR_ROLE_WEIGHT}
    buffers = {name: torch.from_numpy(values[name]).to(DEVICE) for name in ("x", "out")}
    policy = Serial()
    plan = lower_program(program, validate_program(program), weights=weights, buffers=buffers,
                         arena=ScratchArena(DEVICE), device=DEVICE, linear_policy=policy)
    assert plan.kernels == ("matmul", "matmul", "gated_activation")
    assert list(built) == ["streams:gate_up+activation"]
    for run in built["streams:gate_up+activation"]:
        run()  # over the candidates' own outputs: the plan's output is untouched
    assert np.array_equal(buffers["out"].cpu().numpy(), values["out"])
    decision = policy.decisions[-1]
    assert decision.label == "serial" and decision.describe().endswith("serial (streams 2.00 us, serial 1.00 us)")


@pytest.mark.parametrize("softcap", [None, 5.0])
def test_triton_logits_keep_the_fp32_product_softcap_and_masked_tail(softcap):
    from helios.program.builder import ProgramBuilder

    b = ProgramBuilder("logits")
    h = b.state("h", buffer="h", dtype="f32", shape=[2, HIDDEN])
    w = b.weight("w", "w", "f32", [VOCAB, HIDDEN])
    out = b.state("out", buffer="out", dtype="f32", shape=[2, VOCAB])
    b.logits(h, w, sampled_tokens=VOCAB - 11, softcap=softcap, into=out)
    program = b.build()
    values = _values(program, "f32")
    plan, buffers, expected = _run_synthetic(program, "f32", "triton", values)
    assert plan.kernels == ("logits",)
    result = buffers["out"].cpu().numpy()
    assert np.isneginf(result[:, VOCAB - 11:]).all()
    np.testing.assert_allclose(result, expected["out"], rtol=1e-5, atol=1e-5)


def _qkv_program(rows: int, k: int, widths: tuple[int, ...], dtype: str):
    """x [rows, k] -> one matmul per width (a group of one input), each product copied to a state."""
    from helios.program.builder import ProgramBuilder

    b = ProgramBuilder("qkv")
    x = b.state("x", buffer="x", dtype=dtype, shape=[rows, k])
    products = [b.matmul(x, b.weight(f"w{i}", f"w{i}", dtype, [width, k]), name=f"p{i}")
                for i, width in enumerate(widths)]
    for i, (product, width) in enumerate(zip(products, widths, strict=True)):
        b.copy(product, into=b.state(f"out{i}", buffer=f"out{i}", dtype=dtype, shape=[rows, width]))
    return b.build()


@pytest.mark.skipif(not GPU, reason="side streams need a CUDA device")
@pytest.mark.parametrize("kind", ["matmul*3", "gate_up+activation"])
def test_a_group_on_streams_captured_in_a_graph_computes_what_its_products_compute_in_turn(kind):
    """The products forked onto side streams and joined inside a CUDA graph: replays give what the
    serial torch plan gives, and allocate nothing."""
    from helios.production.capture import GraphCapture

    rows, k = 256, 512
    program = _qkv_program(rows, k, (1024, 256, 256), "bf16") if kind == "matmul*3" else None
    if program is None:
        from helios.program.builder import ProgramBuilder

        b = ProgramBuilder("mlp")
        x = b.state("x", buffer="x", dtype="bf16", shape=[rows, k])
        gate = b.matmul(x, b.weight("wg", "wg", "bf16", [1536, k]), name="gate")
        up = b.matmul(x, b.weight("wu", "wu", "bf16", [1536, k]), name="up")
        b.gated_activation(gate, up, activation="silu", into=b.state("out0", buffer="out0", dtype="bf16",
                                                                     shape=[rows, 1536]))
        program = b.build()
    generator = torch.Generator(device=DEVICE).manual_seed(0)

    def random(shape) -> torch.Tensor:
        return (torch.randn(shape, generator=generator, device=DEVICE) * 0.1).to(torch.bfloat16)

    weights = {d.resource: random([int(e) for e in d.shape]) for d in program.tensors
               if d.role == program_pb2.TENSOR_ROLE_WEIGHT}
    plans, buffers = {}, {}
    for path in ("triton", "torch"):
        buffers[path] = {d.buffer: torch.zeros([int(e) for e in d.shape], dtype=torch.bfloat16, device=DEVICE)
                         for d in program.tensors if d.role == program_pb2.TENSOR_ROLE_STATE}
        buffers[path]["x"].copy_(random([rows, k]) if path == "triton" else buffers["triton"]["x"])
        plans[path] = lower_program(program, validate_program(program), weights=weights, buffers=buffers[path],
                                    arena=ScratchArena(DEVICE), device=DEVICE, linear_policy=FixedPolicy(path))
    assert "streams:" + kind in plans["triton"].kernels
    plans["torch"].run()
    capture = GraphCapture(DEVICE)
    capture.capture({"streams": plans["triton"]})
    for tensor in buffers["triton"].values():
        if tensor is not buffers["triton"]["x"]:
            tensor.zero_()
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    for _ in range(10):
        capture.replay("streams")
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
    for name, tensor in buffers["torch"].items():
        torch.testing.assert_close(buffers["triton"][name], tensor, rtol=1e-2, atol=1e-2, msg=name)
        assert tensor.abs().sum() > 0


@pytest.mark.skipif(not GPU, reason="side streams need a CUDA device")
def test_a_launch_on_one_of_its_side_streams_forks_onto_the_others():
    """torch hands out streams from a pool in turn, so the stream a launch runs on (a capture's) can
    be one of its thread's side streams: that one is skipped, and the products still all run."""
    from helios.production.lowering.linear import _side_streams, side_by_side

    a = torch.randn(256, 256, device=DEVICE)
    outs = [torch.empty_like(a) for _ in range(3)]
    launch = side_by_side([lambda i=i, o=o: torch.mm(a * (i + 1), a, out=o) for i, o in enumerate(outs)], DEVICE)
    launch()  # makes this thread's side streams
    taken = _side_streams(DEVICE, 2, torch.cuda.current_stream(DEVICE))[0]
    assert taken not in _side_streams(DEVICE, 2, taken) and len(_side_streams(DEVICE, 2, taken)) == 2
    with torch.cuda.stream(taken):
        for out in outs:
            out.zero_()
        launch()
    torch.cuda.synchronize()
    for i, out in enumerate(outs):
        torch.testing.assert_close(out, (a * (i + 1)) @ a)
