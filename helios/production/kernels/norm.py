"""RMS norm kernels (device side): `rms_norm`, `head_rms_norm` and `layer_norm`, optionally fused with
the residual `add` that feeds them.

One program normalizes one row on a GPU (a block of rows in the CPU interpreter); the row (hidden or head_dim wide) fits one block. With a residual,
the kernel stores `a + b` (rounded to its dtype, as the unfused `add` stores it) and normalizes the
rounded sum, so the fusion never changes the program's meaning.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from helios.production.kernels.launch import dependent, wait_for_prior


# NOTE: the row count unspecialized: a one-row graph whose norms run in its products' prologue
# (lowering/linear.py) falls back to this kernel where a product is timed slower on Triton, and then
# shares the specialization the kernels phase compiled for the graphs of several rows.
@triton.jit(do_not_specialize=["n_rows"])
def _norm_kernel(x_ptr, residual_ptr, sum_ptr, weight_ptr, bias_ptr, out_ptr, n_cols, eps, weight_offset,
                 n_rows, HAS_RESIDUAL: tl.constexpr, LAYER: tl.constexpr, HAS_BIAS: tl.constexpr,
                 ROWS: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    wait_for_prior(PDL)
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, BLOCK)[None, :]
    mask = (cols < n_cols) & (rows < n_rows)
    offsets = rows * n_cols + cols
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        r = tl.load(residual_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        stored = (x + r).to(sum_ptr.dtype.element_ty)
        tl.store(sum_ptr + offsets, stored, mask=mask)
        x = stored.to(tl.float32)
    w = tl.load(weight_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    if LAYER:
        mean = tl.sum(x, axis=1)[:, None] / n_cols
        centered = tl.where(mask, x - mean, 0.0)
        var = tl.sum(centered * centered, axis=1)[:, None] / n_cols
        y = centered / tl.sqrt(var + eps) * w
        if HAS_BIAS:
            y = y + tl.load(bias_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    else:
        mean_square = tl.sum(x * x, axis=1)[:, None] / n_cols
        y = x / tl.sqrt(mean_square + eps) * (w + weight_offset)
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


def norm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, *, eps: float, weight_offset: float = 0.0,
         width: int | None = None, residual: torch.Tensor | None = None, sum_out: torch.Tensor | None = None,
         layer: bool = False, bias: torch.Tensor | None = None, rows_per_program: int | None = None) -> None:
    """Normalize each `width`-wide row of contiguous `x` into `out` (rms, or layer norm with `layer`).

    With `residual`, `sum_out = x + residual` is stored and normalized instead of `x`. `width`
    defaults to the last extent (head_rms_norm passes head_dim: rows are then heads).
    `rows_per_program` (a power of two) overrides the device's tile (the GPU-paths mode).
    """
    width = x.shape[-1] if width is None else width
    rows = x.numel() // width
    block = triton.next_power_of_2(width)
    has_residual = residual is not None
    # NOTE: one row a program on a GPU; in the CPU interpreter each program costs milliseconds, so
    # a program takes as many rows as fit 16K elements.
    per_program = 1 if x.is_cuda else max(1, min(triton.next_power_of_2(rows), 16384 // block))
    if rows_per_program is not None:
        per_program = rows_per_program
    _norm_kernel[(triton.cdiv(rows, per_program),)](
        x, residual if has_residual else x, sum_out if has_residual else out, weight,
        bias if bias is not None else weight, out, width, float(eps), float(weight_offset),
        rows, HAS_RESIDUAL=has_residual, LAYER=layer, HAS_BIAS=bias is not None, ROWS=per_program, BLOCK=block,
        num_warps=4 if block <= 1024 else 8, **dependent(x),
    )
