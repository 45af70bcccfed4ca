"""Activation kernels (device side): `out = act(gate) * up` for silu, gelu (erf) and gelu_tanh, and
the plain `out = act(x)` (version 6) for those and quick_gelu (x * sigmoid(1.702 x)).

Elementwise over contiguous tensors; each program handles one block of elements.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from helios.production.kernels.launch import dependent, wait_for_prior

ACTIVATION_CODES = {"silu": 0, "gelu": 1, "gelu_tanh": 2, "quick_gelu": 3}


@triton.jit
def activate(g, ACTIVATION: tl.constexpr):
    """The activation (code of ACTIVATION_CODES) of FP32 values; shared with the fused products."""
    if ACTIVATION == 0:
        act = g / (1.0 + tl.exp(-g))
    elif ACTIVATION == 1:
        act = 0.5 * g * (1.0 + tl.math.erf(g / 1.4142135623730951))
    elif ACTIVATION == 2:
        inner = 0.7978845608028654 * (g + 0.044715 * g * g * g)
        # tanh(v) = 1 - 2 / (exp(2v) + 1), exact at both saturations
        act = 0.5 * g * (1.0 + (1.0 - 2.0 / (tl.exp(2.0 * inner) + 1.0)))
    else:
        act = g / (1.0 + tl.exp(-1.702 * g))
    return act


@triton.jit
def _gated_kernel(gate_ptr, up_ptr, out_ptr, n, ACTIVATION: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    wait_for_prior(PDL)
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    g = tl.load(gate_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offsets, (activate(g, ACTIVATION) * u).to(out_ptr.dtype.element_ty), mask=mask)


def gated_activation(gate: torch.Tensor, up: torch.Tensor, out: torch.Tensor, *, activation: str,
                     block: int = 1024) -> None:
    """out = activation(gate) * up, elementwise over contiguous tensors of one shape."""
    n = gate.numel()
    _gated_kernel[(triton.cdiv(n, block),)](gate, up, out, n, ACTIVATION=ACTIVATION_CODES[activation], BLOCK=block,
                                              **dependent(gate))


@triton.jit
def _plain_kernel(x_ptr, out_ptr, n, ACTIVATION: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    wait_for_prior(PDL)
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    g = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offsets, activate(g, ACTIVATION).to(out_ptr.dtype.element_ty), mask=mask)


def plain_activation(x: torch.Tensor, out: torch.Tensor, *, activation: str, block: int = 1024) -> None:
    """out = activation(x), elementwise over contiguous tensors of one shape."""
    n = x.numel()
    _plain_kernel[(triton.cdiv(n, block),)](x, out, n, ACTIVATION=ACTIVATION_CODES[activation], BLOCK=block,
                                             **dependent(x))
