"""Skinny matrix product kernels (kernels/linear.py) against the reference operators, and the path
policies of lowering/product_choice.py. On a CPU the kernels run in the Triton interpreter in fp32
(fp16 where the rounding points are the subject); fresh random inputs each test."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helios.production.kernels import linear
from helios.production.kernels.linear import Blocks, LinearShapeError, choose_blocks
from helios.production.lowering.product_choice import (
    Decision,
    FixedPolicy,
    MeasuredPolicy,
    ProductChoiceError,
    ProductShape,
    forget_measurements,
    policy_for,
)
from helios.reference import operators as ref
from tests.production.helpers import ATOL, DEVICE, DTYPE, GPU, RTOL, close, tensor, values

# N and K are multiples of no block below
N, K = 50, 70
# products through a nonlinearity or of 16 rows: FP32 sums in another order (the GPU's DTYPE tolerance where larger)
LOOSE = {"atol": max(ATOL, 1e-4), "rtol": max(RTOL, 1e-4)}


def _small_blocks(rows: int, kind: str = "fma") -> Blocks:
    # several column tiles and several K iterations, with ragged edges in both; "mma": the tensor-core
    # tile (rows padded to 16), software-pipelined
    if kind == "mma":
        return Blocks(16, 16, 32, mma=True, num_stages=2)
    return Blocks(triton_pow2(rows), 16, 32)


def triton_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _operands(rng, rows, widths, k=K, bias=False):
    x = rng.standard_normal((rows, k), dtype=np.float32)
    ws = [rng.standard_normal((n, k), dtype=np.float32) * 0.2 for n in widths]
    bs = [rng.standard_normal(n, dtype=np.float32) for n in widths] if bias else None
    return x, ws, bs


@pytest.mark.parametrize("rows", [1, 3, 8])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("blocks", ["host", "fma", "mma"])
def test_one_product_equals_the_reference_matmul(rows, bias, blocks):
    rng = np.random.default_rng()
    x, (w,), bs = _operands(rng, rows, [N], bias=bias)
    out = torch.full((rows, N), float("nan"), dtype=DTYPE, device=DEVICE)
    linear.linear(tensor(x), [tensor(w)], [out], biases=None if bs is None else [tensor(bs[0])],
                  blocks=None if blocks == "host" else _small_blocks(rows, blocks))
    close(out, ref.matmul(values(x), values(w), None if bs is None else values(bs[0])))


@pytest.mark.parametrize("groups", [2, 3])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("kind", ["fma", "mma"])
def test_one_launch_computes_every_group(groups, bias, kind):
    """q/k/v-style: one input, up to three weights of different N, each into its own output."""
    rng = np.random.default_rng()
    rows = 3
    widths = [N, 17, 33][:groups]
    x, ws, bs = _operands(rng, rows, widths, bias=bias)
    outs = [torch.full((rows, n), float("nan"), dtype=DTYPE, device=DEVICE) for n in widths]
    linear.linear(tensor(x), [tensor(w) for w in ws], outs, biases=None if bs is None else [tensor(b) for b in bs],
                  blocks=_small_blocks(rows, kind))
    for g, out in enumerate(outs):
        close(out, ref.matmul(values(x), values(ws[g]), None if bs is None else values(bs[g])))


@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize(("rows", "kind"), [(1, "fma"), (5, "fma"), (5, "mma")])
def test_gated_product_equals_matmuls_then_activation(activation, rows, kind):
    rng = np.random.default_rng()
    x, (wg, wu), bs = _operands(rng, rows, [N, N], bias=rows == 5)
    out = torch.full((rows, N), float("nan"), dtype=DTYPE, device=DEVICE)
    linear.gated_linear(tensor(x), tensor(wg), tensor(wu), out, activation=activation,
                        gate_bias=None if bs is None else tensor(bs[0]), up_bias=None if bs is None else tensor(bs[1]),
                        blocks=_small_blocks(rows, kind))
    gate = ref.matmul(values(x), values(wg), None if bs is None else values(bs[0]))
    up = ref.matmul(values(x), values(wu), None if bs is None else values(bs[1]))
    close(out, ref.gated_activation(values(gate), values(up), activation=activation), **LOOSE)


@pytest.mark.parametrize("kind", ["fma", "mma"])
def test_gated_product_rounds_gate_and_up_where_the_unfused_matmuls_store_them(kind):
    """fp16 (exact in the interpreter): the fused result equals matmul -> f16, matmul -> f16, activation -> f16."""
    rng = np.random.default_rng()
    rows = 4
    x, (wg, wu), _ = _operands(rng, rows, [N, N])
    half = [torch.from_numpy(a).to(device=DEVICE, dtype=torch.float16) for a in (x, wg, wu)]
    out = torch.empty((rows, N), dtype=torch.float16, device=DEVICE)
    linear.gated_linear(*half, out, activation="silu", blocks=_small_blocks(rows, kind))
    xs, gs, us = (t.float().cpu().numpy() for t in half)
    gate = (xs @ gs.T).astype(np.float16).astype(np.float32)
    up = (xs @ us.T).astype(np.float16).astype(np.float32)
    expected = ref.gated_activation(gate, up, activation="silu").astype(np.float16).astype(np.float32)
    # one fp16 ulp: the FP32 sums may differ in their last bits before rounding
    np.testing.assert_allclose(out.float().cpu().numpy(), expected, rtol=2e-3, atol=2e-3)
    rounded_away = ref.gated_activation(xs @ gs.T, xs @ us.T, activation="silu")
    assert np.abs(out.float().cpu().numpy() - expected).mean() < np.abs(rounded_away - expected).mean()


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize(("rows", "kind", "groups"), [(1, "fma", 1), (3, "fma", 3), (5, "fma", 2), (1, "host", 3)])
def test_a_norm_prologue_product_equals_add_norm_then_matmuls(residual, rows, kind, groups):
    """rms_norm(x [+ r]) @ W^T in one launch: the sum stored (once, by program 0), each group's
    product of the normalized rows, the norm's weight offset applied, biases after the norm."""
    rng = np.random.default_rng()
    widths = [N, 17, 33][:groups]
    x, ws, bs = _operands(rng, rows, widths, bias=groups == 3)
    r = rng.standard_normal((rows, K), dtype=np.float32)
    weight = rng.standard_normal(K, dtype=np.float32)
    eps, offset = 1e-5, 0.5
    total = torch.full((rows, K), float("nan"), dtype=DTYPE, device=DEVICE)
    norm = linear.NormPrologue(tensor(weight), eps, offset, residual=tensor(r) if residual else None,
                               sum_out=total if residual else None)
    outs = [torch.full((rows, n), float("nan"), dtype=DTYPE, device=DEVICE) for n in widths]
    linear.linear(tensor(x), [tensor(w) for w in ws], outs, norm=norm,
                  biases=None if bs is None else [tensor(b) for b in bs],
                  blocks=None if kind == "host" else _small_blocks(rows, kind))
    summed = values(ref.add(values(x), values(r))) if residual else values(x)
    normalized = values(ref.rms_norm(summed, values(weight), eps=eps, weight_offset=offset))
    if residual:
        close(total, summed)
    else:
        assert bool(total.isnan().all())  # no sum without a residual
    for g, out in enumerate(outs):
        close(out, ref.matmul(normalized, values(ws[g]), None if bs is None else values(bs[g])), **LOOSE)


@pytest.mark.parametrize(("rows", "kind"), [(1, "fma"), (5, "fma")])
def test_a_norm_prologue_gated_product_equals_add_norm_then_the_gated_activation(rows, kind):
    rng = np.random.default_rng()
    x, (wg, wu), _ = _operands(rng, rows, [N, N])
    r = rng.standard_normal((rows, K), dtype=np.float32)
    weight = rng.standard_normal(K, dtype=np.float32)
    total = torch.empty((rows, K), dtype=DTYPE, device=DEVICE)
    out = torch.full((rows, N), float("nan"), dtype=DTYPE, device=DEVICE)
    linear.gated_linear(tensor(x), tensor(wg), tensor(wu), out, activation="silu", blocks=_small_blocks(rows, kind),
                        norm=linear.NormPrologue(tensor(weight), 1e-6, residual=tensor(r), sum_out=total))
    summed = values(ref.add(values(x), values(r)))
    normalized = values(ref.rms_norm(summed, values(weight), eps=1e-6))
    gate, up = ref.matmul(normalized, values(wg), None), ref.matmul(normalized, values(wu), None)
    close(total, summed)
    close(out, ref.gated_activation(values(gate), values(up), activation="silu"), **LOOSE)


def test_a_norm_prologue_rounds_the_sum_where_the_unfused_add_stores_it_and_agrees_within_the_rounding():
    """fp16 (exact in the interpreter): the stored sum is add -> f16 to the bit; the product agrees
    with add -> f16, rms_norm -> f16, matmul -> f16 within the normalized rows' f16 rounding, and
    is closer to the unrounded result than the unfused pair (no rounding of the normalized rows)."""
    rng = np.random.default_rng()
    rows = 2
    x, (w,), _ = _operands(rng, rows, [N])
    r = rng.standard_normal((rows, K), dtype=np.float32)
    weight = rng.standard_normal(K, dtype=np.float32)
    half = [torch.from_numpy(a).to(device=DEVICE, dtype=torch.float16) for a in (x, r, w, weight)]
    total = torch.empty((rows, K), dtype=torch.float16, device=DEVICE)
    out = torch.empty((rows, N), dtype=torch.float16, device=DEVICE)
    linear.linear(half[0], [half[2]], [out], blocks=_small_blocks(rows, "fma"),
                  norm=linear.NormPrologue(half[3], 1e-6, residual=half[1], sum_out=total))
    xs, rs, ws, weights = (t.float().cpu().numpy() for t in half)
    f16 = lambda a: a.astype(np.float16).astype(np.float32)  # noqa: E731
    summed = f16(xs + rs)
    np.testing.assert_array_equal(total.float().cpu().numpy(), summed)
    unfused = f16(f16(ref.rms_norm(summed, weights, eps=1e-6)) @ ws.T)
    exact = ref.rms_norm(summed.astype(np.float64), weights, eps=1e-6) @ ws.T.astype(np.float64)
    produced = out.float().cpu().numpy()
    np.testing.assert_allclose(produced, unfused, rtol=1e-2, atol=1e-2)
    assert np.abs(produced - exact).mean() <= np.abs(unfused - exact).mean()


def test_a_norm_prologue_refuses_operands_it_cannot_take():
    x = torch.zeros((2, K), dtype=DTYPE, device=DEVICE)
    w = torch.zeros((N, K), dtype=DTYPE, device=DEVICE)
    out = torch.zeros((2, N), dtype=DTYPE, device=DEVICE)
    with pytest.raises(LinearShapeError, match="norm weight"):
        linear.linear(x, [w], [out], norm=linear.NormPrologue(torch.zeros(K + 1, device=DEVICE), 1e-6))
    with pytest.raises(LinearShapeError, match="together"):
        linear.linear(x, [w], [out], norm=linear.NormPrologue(torch.zeros(K, device=DEVICE), 1e-6, residual=x))
    with pytest.raises(LinearShapeError, match="must not overwrite"):
        linear.linear(x, [w], [out], norm=linear.NormPrologue(torch.zeros(K, device=DEVICE), 1e-6,
                                                              residual=x.clone(), sum_out=x))
    with pytest.raises(LinearShapeError, match="CUDA-core tiles"):
        linear.linear(x, [w], [out], norm=linear.NormPrologue(torch.zeros(K, device=DEVICE), 1e-6),
                      blocks=_small_blocks(2, "mma"))


@pytest.mark.parametrize("kind", ["fma", "mma"])
def test_logits_columns_are_fp32_and_only_the_sampled_ids_are_written(kind):
    """16-bit weights, FP32 output without rounding; columns past `columns` are left as they were."""
    rng = np.random.default_rng()
    rows, vocab, sampled = 2, 64, 40
    x, (w,), _ = _operands(rng, rows, [vocab])
    # the interpreter's bf16 dot is broken (FACTS.md): its MMA tile takes fp16, the other 16-bit type
    half = torch.float16 if kind == "mma" and not GPU else torch.bfloat16
    h16 = torch.from_numpy(x).to(device=DEVICE, dtype=half)
    w16 = torch.from_numpy(w).to(device=DEVICE, dtype=half)
    out = torch.full((rows, vocab), 7.0, dtype=torch.float32, device=DEVICE)
    linear.linear(h16, [w16], [out], columns=[sampled], blocks=_small_blocks(rows, kind))
    expected = ref.logits(h16.float().cpu().numpy(), w16.float().cpu().numpy())
    np.testing.assert_allclose(out[:, :sampled].cpu().numpy(), expected[:, :sampled], rtol=1e-5, atol=1e-5)
    assert bool((out[:, sampled:] == 7.0).all())


def test_sixteen_rows_and_a_strided_input():
    rng = np.random.default_rng()
    wide = tensor(rng.standard_normal((16, 2 * K), dtype=np.float32))
    x = wide[:, :K]  # row stride 2K
    (w,) = [rng.standard_normal((N, K), dtype=np.float32)]
    out = torch.empty((16, N), dtype=DTYPE, device=DEVICE)
    linear.linear(x, [tensor(w)], [out])
    close(out, ref.matmul(values(x.float().cpu().numpy()), values(w)), **LOOSE)


def test_malformed_operands_are_refused():
    x = torch.zeros((17, K), dtype=DTYPE, device=DEVICE)
    w = torch.zeros((N, K), dtype=DTYPE, device=DEVICE)
    with pytest.raises(LinearShapeError, match="17 rows"):
        linear.linear(x, [w], [torch.zeros((17, N), dtype=DTYPE, device=DEVICE)])
    x = x[:2]
    with pytest.raises(LinearShapeError, match="K = 70"):
        linear.linear(x, [w[:, :60].contiguous()], [torch.zeros((2, N), dtype=DTYPE, device=DEVICE)])
    with pytest.raises(LinearShapeError, match="1..3 products"):
        linear.linear(x, [w] * 4, [torch.zeros((2, N), dtype=DTYPE, device=DEVICE)] * 4)
    with pytest.raises(LinearShapeError, match="unit column stride"):
        linear.linear(x, [w.t()], [torch.zeros((2, K), dtype=DTYPE, device=DEVICE)])
    with pytest.raises(LinearShapeError, match="together"):
        linear.gated_linear(x, w, w, torch.zeros((2, N), dtype=DTYPE, device=DEVICE), activation="silu",
                            gate_bias=torch.zeros(N, dtype=DTYPE, device=DEVICE))
    with pytest.raises(LinearShapeError, match="power of two"):
        Blocks(1, 24, 64)
    with pytest.raises(LinearShapeError, match="at most 16"):
        Blocks(32, 8, 64)


@pytest.mark.parametrize("rows", [1, 4, 16])
@pytest.mark.parametrize(("n", "k"), [(1024, 1024), (3072, 1024), (1024, 3072), (151936, 1024), (4096, 14336)])
def test_gpu_blocks_fill_an_h200_with_the_measured_tiles(rows, n, k):
    blocks = choose_blocks(rows, n, k, cuda=True)
    assert -(-n // blocks.block_n) >= 256  # about two programs per SM of 132 at N >= 1024
    assert blocks.block_k >= 128 and blocks.block_m >= rows
    assert k % blocks.block_k == 0  # no masked K steps where a power of two divides K
    # the tiles bench/kernel_tiles.py measured fastest on an H200 (BENCHMARKS.md, issue #6 tile sweep)
    expected = {1: (2, 2048 if k % 2048 == 0 else 1024, 2), 4: (4, 1024, 4), 16: (2, 512, 4)}[rows]
    assert (blocks.block_n, blocks.block_k, blocks.num_warps) == expected
    assert choose_blocks(rows, n, k, cuda=True, gated=True) == blocks


@pytest.mark.parametrize("rows", [1, 2, 4, 16])
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize(("n", "k"), [(1024, 1024), (6144, 4096), (4096, 14336), (128256, 4096), (2048, 1000)])
def test_gpu_tensor_core_tiles_from_two_rows_of_16_bit_operands(rows, gated, n, k):
    blocks = choose_blocks(rows, n, k, cuda=True, gated=gated, tensor_cores=True)
    assert blocks.mma == (rows >= linear.MMA_ROWS)
    if not blocks.mma:
        assert blocks == choose_blocks(rows, n, k, cuda=True)
        return
    # the tiles bench/kernel_tiles.py measured fastest on an H200 (BENCHMARKS.md, issue #16 tile sweep)
    block_n, block_k, stages = (64, 128, 4) if gated else (32, 256, 4)
    assert (blocks.block_m, blocks.block_n, blocks.num_stages, blocks.num_warps) == (16, block_n, stages, 4)
    assert blocks.block_k == block_k or k % block_k and (k % blocks.block_k == 0 or k % 16)


def test_cpu_blocks_take_whole_extents():
    blocks = choose_blocks(3, 50, 70, cuda=False)
    assert (blocks.block_m, blocks.block_n, blocks.block_k) == (4, 64, 128)


# ------------------------------------------------------------------------------------------ policies

SHAPE = ProductShape(1, (1024, 512, 512), 1024, "bfloat16xbfloat16->bfloat16", "matmul*3")


def test_fixed_policy_records_each_shape_once_in_order():
    policy = FixedPolicy("triton")
    other = ProductShape(1, (3072,), 1024, "bfloat16xbfloat16->bfloat16", "matmul")

    def candidates():
        raise AssertionError("a fixed policy times nothing")
    assert [policy.choose(s, candidates) for s in (SHAPE, other, SHAPE)] == ["triton"] * 3
    assert [d.shape for d in policy.decisions] == [SHAPE, other]
    assert "matmul*3 M=1 N=1024+512+512 K=1024" in policy.table()
    assert policy_for("torch", torch.device("cpu")).choose(SHAPE, candidates) == "torch"
    assert isinstance(policy_for("auto", torch.device("cpu")), FixedPolicy) or GPU


def test_measured_policy_takes_the_faster_path_and_times_a_shape_once_per_process():
    forget_measurements()
    calls = []
    durations = {"triton": 2e-6, "torch": 9e-6}

    def timer(run):
        run()
        return durations[calls[-1]]

    def candidates():
        return (lambda: calls.append("triton")), (lambda: calls.append("torch"))
    policy = MeasuredPolicy(timer, key="test-device")
    assert policy.choose(SHAPE, candidates) == "triton"
    assert calls == ["triton", "torch"]
    (decision,) = policy.decisions
    assert decision.path == "triton" and decision.triton_us == pytest.approx(2.0) and decision.torch_us == 9.0
    # a second policy of the same device reuses the process's measurement; another device measures
    again = MeasuredPolicy(timer, key="test-device")
    assert again.choose(SHAPE, candidates) == "triton" and calls == ["triton", "torch"]
    durations["triton"] = 1e-5
    assert MeasuredPolicy(timer, key="other-device").choose(SHAPE, candidates) == "torch"
    forget_measurements()


def test_a_norm_prologue_decision_names_its_paths_fused_and_apart():
    norm_shape = ProductShape(1, (8, 4, 4), 16, "bfloat16xbfloat16->bfloat16", "add+rms_norm+matmul*3")
    apart = Decision(norm_shape, "torch", 7.9, 7.6)
    assert apart.labels == ("fused", "apart") and apart.label == "apart"
    assert apart.describe().endswith(": apart (fused 7.90 us, apart 7.60 us)")
    assert Decision(SHAPE, "triton", 1.0, 2.0).describe().endswith(": triton (triton 1.00 us, torch 2.00 us)")


def test_malformed_shapes_and_decisions_are_refused():
    with pytest.raises(ProductChoiceError, match="unknown fusion"):
        ProductShape(1, (8,), 8, "f", "conv")
    with pytest.raises(ProductChoiceError, match="positive extents"):
        ProductShape(1, (), 8, "f", "matmul")
    with pytest.raises(ProductChoiceError, match="unknown path"):
        Decision(SHAPE, "cublas")
    with pytest.raises(ProductChoiceError, match="not a duration"):
        Decision(SHAPE, "torch", float("nan"), 1.0)
    with pytest.raises(ProductChoiceError, match="unknown product path"):
        FixedPolicy("fast")


def test_a_deferred_policy_answers_triton_until_it_measures_what_the_warm_pass_named():
    """NativeModel's two lowerings: the warm pass gets Triton for every new shape (so every Triton
    specialization is compiled with the others), measure_pending times them, the final pass reads the decisions."""
    forget_measurements()
    released = []

    class Timer:
        def __call__(self, run):
            return {"triton": 5e-6, "torch": 3e-6}[run()]

        def release(self):
            released.append(True)

    built = []

    def candidates():
        built.append(True)
        return (lambda: "triton"), (lambda: "torch")
    policy = MeasuredPolicy(Timer(), key="deferred-device", deferred=True)
    assert policy.choose(SHAPE, candidates) == "triton" and policy.choose(SHAPE, candidates) == "triton"
    assert policy.decisions == () and not built
    policy.measure_pending()
    assert built == [True] and released == [True]
    assert policy.choose(SHAPE, candidates) == "torch"
    (decision,) = policy.decisions
    assert (decision.triton_us, decision.torch_us) == (pytest.approx(5.0), pytest.approx(3.0))
    # measured once per process: a later deferred policy decides at once
    assert MeasuredPolicy(Timer(), key="deferred-device", deferred=True).choose(SHAPE, candidates) == "torch"
    forget_measurements()


# ------------------------------------------------------------------------------------------ H200 code

def sm90_report() -> dict[str, dict[str, int]]:
    """Compile the decode shapes of a Qwen3-0.6B-sized model for sm_90 (no GPU needed: Triton lowers to
    PTX and its bundled ptxas assembles) with the hints Triton's launcher gives 16-byte-aligned
    pointers and multiple-of-16 integers; per kernel: registers, local memory (spills) and loads."""
    import os
    import re
    import subprocess

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    hinted = {"stride_x", "k_extent", "sw0", "sw1", "sw2", "so0", "so1", "so2", "swg", "swu", "stride_out"}
    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")

    def build(kernel, signature: dict[str, str], const: dict[str, object], warps: int, k: int,
              stages: int | None) -> dict[str, int]:
        signature = {**signature, **dict.fromkeys(const, "constexpr")}
        names = list(signature)
        # strides are K (weights, x) or N (outputs): Triton hints them only where they divide by 16
        attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
                 if signature[n].startswith("*") or (n in hinted and k % 16 == 0)}
        source = ASTSource(fn=kernel, signature=signature, attrs=attrs,
                           constexprs={(names.index(k),): v for k, v in const.items()})
        options = {"num_warps": warps} | ({"num_stages": stages} if stages is not None else {})
        compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
        ptx = compiled.asm["ptx"]
        cubin = os.path.join(os.environ["REPORT_DIR"], "kernel.cubin")
        with open(cubin, "wb") as f:
            f.write(compiled.asm["cubin"])
        # cuobjdump ships with Triton's NVIDIA backend, beside ptxas
        usage = subprocess.run([os.path.join(tools, "cuobjdump"), "-res-usage", cubin], capture_output=True,
                               text=True, check=True).stdout
        # 16-byte loads: into registers (CUDA-core tiles) or asynchronously into shared memory (pipelined MMA tiles)
        vector_loads = len(re.findall(r"ld\.global\.v[24]\.b32", ptx)) + len(
            re.findall(r"cp\.async\.c[ag]\.shared\.global[^;]*, 0x10(?:, |;)", ptx))
        # weights read before waiting for the predecessor (dependent launch): global loads ahead of
        # the first griddepcontrol.wait in program order
        before_wait = ptx.split("griddepcontrol.wait", 1)[0] if "griddepcontrol.wait" in ptx else ""
        return {"aligned": int(k % 16 == 0), "vector_loads": vector_loads,
                "loads_before_wait": len(re.findall(r"\bld\.global\.", before_wait)),
                "rows": int(const["BLOCK_M"]),
                "scalar_16bit_loads": len(re.findall(r"ld\.global\.b16", ptx)),
                "tensor_core_ops": len(re.findall(r"\b(?:mma\.sync|wgmma\.mma_async)\.", ptx)),
                "mma": int(const["MMA"]),
                "registers": int(re.search(r"REG:(\d+)", usage).group(1)),
                "local_bytes": int(re.search(r"LOCAL:(\d+)", usage).group(1))}

    # the norm prologue's operands (residual, sum, norm weight, eps, offset)
    prologue = {"r_ptr": "*bf16", "s_ptr": "*bf16", "nw_ptr": "*bf16", "eps": "fp32", "w_offset": "fp32"}

    def matmuls(groups: int, blocks: Blocks, k: int, out: str, bias: bool = False, norm: bool = False) -> dict:
        signature = {"x_ptr": "*bf16", "stride_x": "i32", "m_rows": "i32", "k_extent": "i32"}
        for g in range(3):
            signature |= {f"w{g}": "*bf16", f"sw{g}": "i32", f"b{g}": "*bf16", f"o{g}": f"*{out}",
                          f"so{g}": "i32", f"n{g}": "i32"}
            if g < 2:
                signature[f"tiles{g}"] = "i32"
        return build(linear._linear_kernel, signature | prologue, {
            "GROUPS": groups, "HAS_BIAS": bias, "EVEN_K": k % blocks.block_k == 0, "BLOCK_M": blocks.block_m,
            "BLOCK_N": blocks.block_n, "BLOCK_K": blocks.block_k, "MMA": blocks.mma, "PRECISION": "tf32",
            "NORM": norm, "RESIDUAL": norm, "PDL": 2},
            blocks.num_warps, k, blocks.num_stages)

    def gated(blocks: Blocks, k: int, norm: bool = False) -> dict[str, int]:
        signature = {"x_ptr": "*bf16", "stride_x": "i32", "m_rows": "i32", "k_extent": "i32", "wg": "*bf16",
                     "swg": "i32", "bg": "*bf16", "wu": "*bf16", "swu": "i32", "bu": "*bf16", "out_ptr": "*bf16",
                     "stride_out": "i32", "n_extent": "i32"}
        return build(linear._gated_kernel, signature | prologue, {
            "HAS_BIAS": False, "ACTIVATION": 0, "EVEN_K": k % blocks.block_k == 0, "BLOCK_M": blocks.block_m,
            "BLOCK_N": blocks.block_n, "BLOCK_K": blocks.block_k, "MMA": blocks.mma, "PRECISION": "tf32",
            "NORM": norm, "RESIDUAL": norm, "PDL": 2},
            blocks.num_warps, k, blocks.num_stages)

    return {
        "qkv": matmuls(3, choose_blocks(1, 4096, 1024, cuda=True), 1024, "bf16"),
        "down": matmuls(1, choose_blocks(1, 1024, 3072, cuda=True), 3072, "bf16"),
        # q/k/v with biases (Qwen2) over a K no power of two >= 128 divides: masked K steps, scalar loads
        "qkv_bias_ragged_k": matmuls(3, choose_blocks(4, 2048, 1000, cuda=True), 1000, "bf16", bias=True),
        "logits": matmuls(1, choose_blocks(1, 151936, 1024, cuda=True), 1024, "fp32"),
        "gate_up": gated(choose_blocks(1, 3072, 1024, cuda=True, gated=True), 1024),
        "gate_up_m16": gated(choose_blocks(16, 3072, 1024, cuda=True, gated=True), 1024),
        # tensor-core tiles: 4 rows (a W = 4 verification) and 16, an 8B layer's products
        "qkv_mma_m4": matmuls(3, choose_blocks(4, 6144, 4096, cuda=True, tensor_cores=True), 4096, "bf16"),
        "down_mma_m16": matmuls(1, choose_blocks(16, 4096, 14336, cuda=True, tensor_cores=True), 14336, "bf16"),
        "gate_up_mma_m4": gated(choose_blocks(4, 14336, 4096, cuda=True, gated=True, tensor_cores=True), 4096),
        # the residual add and RMS norm in the prologue (a batch-1 decode layer's two norms; the
        # lowering takes the prologue on CUDA-core tiles only)
        "qkv_norm": matmuls(3, choose_blocks(1, 4096, 1024, cuda=True), 1024, "bf16", norm=True),
        "gate_up_norm": gated(choose_blocks(1, 3072, 1024, cuda=True, gated=True), 1024, norm=True),
    }


def test_the_kernels_compile_for_an_h200_with_vector_weight_loads_and_no_spills(tmp_path):
    """The interpreter checks values, not code generation: compile for sm_90 in a process without
    TRITON_INTERPRET and require 16-byte weight loads, no 16-bit scalar weight loads and no spills."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"REPORT_DIR": str(tmp_path)}
    script = ("import json; from tests.production.test_kernels_linear import sm90_report; "
              "print(json.dumps(sm90_report()))")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert sum(kernel["aligned"] for kernel in report.values()) == len(report) - 1
    for name, kernel in report.items():
        if kernel["aligned"]:
            assert kernel["vector_loads"] >= 2, (name, kernel)
            assert kernel["scalar_16bit_loads"] <= 1, (name, kernel)  # at most the x row of a 1-row product
        assert kernel["local_bytes"] == 0 and 0 < kernel["registers"] <= 128, (name, kernel)
        # the MMA tiles multiply on tensor cores, the others on CUDA cores
        assert (kernel["tensor_core_ops"] > 0) == bool(kernel["mma"]), (name, kernel)
        # every kernel waits for its predecessor before its first load (dependent launch)
        assert kernel["loads_before_wait"] == 0, (name, kernel)
