"""The slack a fusion's unrounded intermediate is granted (`conformance.tolerance`): the norm folded
into the product reading it keeps the normalized rows in FP32 where the unfused norm stores them
rounded. Emulated here in NumPy on the conformance cases' own draws in bf16 (a GPU's kernel does the
same arithmetic in its one pass): without the slack the plain bf16 tolerance rejects some correct
fused results; with it, every draw passes, and a real defect (the norm's weight dropped) is still
rejected."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.operators import NORM_GATE_UP, NORM_QKV, OperatorCases, OperatorProgram, case_builders
from conformance.tolerance import first_mismatch, tolerance
from conformance.workload import load_operator_cases
from helios.program.builder import ProgramBuilder
from helios.program.types import DTYPES_BY_NAME
from helios.program.validate import validate_program
from helios.reference import operators as ref
from helios.reference.interpreter import execute, round_to_dtype

BF16 = DTYPES_BY_NAME["bf16"]
DRAWS = 60


def _draw(operator: str, seed: int, variant: str = "one_row"):
    cases = OperatorCases.from_json(load_operator_cases())
    _, _, cohort, build = next(c for c in case_builders(cases) if c[0] == operator and c[1] == variant)
    p = OperatorProgram("bf16", ProgramBuilder("case"))
    build(p, np.random.default_rng(seed), cohort, cases.geometry, cases)
    program = p.builder.build()
    env = execute(program, {k: v.copy() for k, v in p.values.items()}, validate_program(program))
    return p, env


def _fused_qkv(env, k: str, *, drop_weight: bool = False) -> np.ndarray:
    """One pass: the stored (rounded) sum's rows times the norm weight in FP32, the product divided
    by the RMS, the bias, one rounding."""
    total = env["total"].astype(np.float32)
    weight = np.ones_like(env["w"]) if drop_weight else env["w"]
    rms = np.sqrt(np.mean(total * total, axis=-1, keepdims=True) + np.float32(1e-5))
    product = ((total * weight) @ env[f"w{k}"].T) / rms + env[f"b{k}"]
    return round_to_dtype(product.astype(np.float32), BF16)


def _fused_gated(env, activation: str) -> np.ndarray:
    normed = ref.rms_norm(env["x"], env["w"], eps=1e-6, weight_offset=1.0)  # FP32, never rounded
    gate, up = normed @ env["w_gate"].T, normed @ env["w_up"].T
    return round_to_dtype(ref.gated_activation(gate, up, activation=activation), BF16)


def _mismatches(draws, *, slack: bool) -> int:
    limits = tolerance("bf16")
    found = 0
    for p, env, output, fused in draws:
        allowance = p.slack[output](env, limits.roundoff) if slack else None
        found += first_mismatch(env[output], fused, limits.relative, slack=allowance) is not None
    return found


def test_the_norm_qkv_fusion_needs_the_slack_and_passes_with_it():
    draws = []
    for seed in range(DRAWS):
        p, env = _draw(NORM_QKV, seed)
        draws += [(p, env, f"{k}_out", _fused_qkv(env, k)) for k in "qkv"]
    assert _mismatches(draws, slack=False) > 0  # the plain tolerance rejects correct fused rows
    assert _mismatches(draws, slack=True) == 0


def test_the_slack_still_rejects_a_fused_norm_without_its_weight():
    draws = []
    for seed in range(10):
        p, env = _draw(NORM_QKV, seed)
        draws += [(p, env, f"{k}_out", _fused_qkv(env, k, drop_weight=True)) for k in "qkv"]
    assert _mismatches(draws, slack=True) == len(draws)


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh", "gelu"])
def test_the_norm_gate_up_fusion_passes_with_its_slack(activation):
    draws = []
    for seed in range(DRAWS):
        p, env = _draw(NORM_GATE_UP, seed, f"{activation}/one_row")
        draws.append((p, env, "out", _fused_gated(env, activation)))
    assert _mismatches(draws, slack=True) == 0


def test_slack_is_added_to_the_allowance_and_only_widens_it():
    reference, production = np.array([0.5, 3.0]), np.array([0.52, 3.0])
    assert first_mismatch(reference, production, 1e-2) == (0,)
    assert first_mismatch(reference, production, 1e-2, slack=np.array([0.011, 0.0])) is None
    assert first_mismatch(reference, production, 1e-2, slack=np.array([0.009, 0.0])) == (0,)
