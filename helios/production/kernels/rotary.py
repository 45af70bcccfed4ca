"""Rotary embedding fused with the head RMS norm before it and the paged cache writes after it (device side).

One row body (`_rotate_rows`), chosen by constexpr flags, covers the attention prologue of a layer's
q or k/v rows:
  - `rotary`: rotate each head of a row and store it (`out`);
  - `paged_cache_write`: store a row's `[kv_heads, head_dim]` into its lane's page slot;
  - rotary + cache write: the rotated keys go straight into the cache (and to `out` only when the
    program reads the rotated tensor again), saving a launch and a round trip through memory;
  - a head RMS norm in the prologue (`HeadNorm`): each head is normalized first, exactly as the
    unfused `head_rms_norm` launch computes it, and rounded to the input's dtype (the dtype the
    unfused norm stores and rotary reads back) before it is rotated;
  - a second cache plane (`values` into `value_cache`): the values of the same rows, unrotated, go
    to the same slots of their own plane in the same launch (k and v cache writes as one launch).

`rotary_cache` launches the body for one tensor; `rotary_pair` launches it for q and for k (with its
cache writes) as one launch, a second grid axis choosing the tensor.

Layouts (docs/operators.md): rows `[P, heads * head_dim]`, cache plane `[pages, T, kv_heads, head_dim]`,
the token at position p of lane l lives at `[page_table[l, p // T], p % T]`. The inverse frequencies
and attention factor are computed once on the host at lowering, exactly as the reference computes them.
One program handles one packed row of one tensor on a GPU (a block of rows in the CPU interpreter),
all heads at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from helios.production.kernels.launch import dependent, wait_for_prior


@triton.jit
def _rotate_rows(x_ptr, norm_weight_ptr, out_ptr, cache_ptr, values_ptr, value_cache_ptr, positions_ptr,
                 inv_freq_ptr, lane_ptr, page_table_ptr, first_row, n_rows, heads, head_dim, rotary_dim,
                 attention_factor, eps, weight_offset, page_tokens, max_pages, NORM: tl.constexpr,
                 ROTATE: tl.constexpr, WRITE_OUT: tl.constexpr, WRITE_CACHE: tl.constexpr,
                 WRITE_VALUES: tl.constexpr, ROWS: tl.constexpr, HEADS_BLOCK: tl.constexpr, DIM_BLOCK: tl.constexpr):
    # [ROWS, HEADS_BLOCK, DIM_BLOCK] elements: row r, head h, feature d
    r = first_row + tl.arange(0, ROWS)
    row_mask = r < n_rows
    rows = r[:, None, None]
    h = tl.arange(0, HEADS_BLOCK)[None, :, None]
    d = tl.arange(0, DIM_BLOCK)[None, None, :]
    width = heads * head_dim
    mask = (h < heads) & (d < head_dim) & row_mask[:, None, None]
    base = x_ptr + rows * width + h * head_dim
    x = tl.load(base + d, mask=mask, other=0.0).to(tl.float32)
    positions = tl.load(positions_ptr + r, mask=row_mask, other=0)
    if NORM:
        # the unfused norm kernel's expression, then the rounding its store applies
        root = tl.sqrt(tl.sum(x * x, axis=2)[:, :, None] / head_dim + eps)
        w = tl.load(norm_weight_ptr + d, mask=d < head_dim, other=0.0).to(tl.float32)
        x = (x / root * (w + weight_offset)).to(x_ptr.dtype.element_ty).to(tl.float32)
    if ROTATE:
        half = rotary_dim // 2
        i = tl.where(d < half, d, d - half)
        inv_freq = tl.load(inv_freq_ptr + i, mask=d < rotary_dim, other=0.0)
        angle = positions.to(tl.float32)[:, None, None] * inv_freq
        cos = tl.cos(angle) * attention_factor
        sin = tl.sin(angle) * attention_factor
        partner_d = tl.where(d < half, d + half, d - half)
        partner = tl.load(base + partner_d, mask=mask & (d < rotary_dim), other=0.0).to(tl.float32)
        if NORM:
            partner_w = tl.load(norm_weight_ptr + partner_d, mask=d < rotary_dim, other=0.0).to(tl.float32)
            partner = (partner / root * (partner_w + weight_offset)).to(x_ptr.dtype.element_ty).to(tl.float32)
        rotated_half = tl.where(d < half, -partner, partner)
        x = tl.where(d < rotary_dim, x * cos + rotated_half * sin, x)
    if WRITE_OUT:
        tl.store(out_ptr + rows * width + h * head_dim + d, x.to(out_ptr.dtype.element_ty), mask=mask)
    if WRITE_CACHE:
        lane = tl.load(lane_ptr + r, mask=row_mask, other=-1)
        live = lane >= 0
        page = tl.load(page_table_ptr + tl.maximum(lane, 0).to(tl.int64) * max_pages + positions // page_tokens,
                       mask=live, other=0).to(tl.int64)
        slot = (page * page_tokens + positions % page_tokens)[:, None, None]
        tl.store(cache_ptr + slot * width + h * head_dim + d, x.to(cache_ptr.dtype.element_ty),
                 mask=mask & live[:, None, None])
        if WRITE_VALUES:
            v = tl.load(values_ptr + rows * width + h * head_dim + d, mask=mask & live[:, None, None], other=0.0)
            tl.store(value_cache_ptr + slot * width + h * head_dim + d, v.to(value_cache_ptr.dtype.element_ty),
                     mask=mask & live[:, None, None])


@triton.jit
def _rotary_cache_kernel(x_ptr, positions_ptr, inv_freq_ptr, norm_weight_ptr, out_ptr, cache_ptr, values_ptr,
                         value_cache_ptr, lane_ptr, page_table_ptr,
                         n_rows, heads, head_dim, rotary_dim, attention_factor, eps, weight_offset, page_tokens,
                         max_pages, NORM: tl.constexpr, ROTATE: tl.constexpr, WRITE_OUT: tl.constexpr,
                         WRITE_CACHE: tl.constexpr, WRITE_VALUES: tl.constexpr,
                         ROWS: tl.constexpr, HEADS_BLOCK: tl.constexpr, DIM_BLOCK: tl.constexpr,
                         PDL: tl.constexpr):
    wait_for_prior(PDL)
    _rotate_rows(x_ptr, norm_weight_ptr, out_ptr, cache_ptr, values_ptr, value_cache_ptr, positions_ptr,
                 inv_freq_ptr, lane_ptr, page_table_ptr, tl.program_id(0).to(tl.int64) * ROWS, n_rows, heads,
                 head_dim, rotary_dim, attention_factor, eps, weight_offset, page_tokens, max_pages, NORM, ROTATE,
                 WRITE_OUT, WRITE_CACHE, WRITE_VALUES, ROWS, HEADS_BLOCK, DIM_BLOCK)


@triton.jit
def _rotary_pair_kernel(q_ptr, q_norm_ptr, q_out_ptr, k_ptr, k_norm_ptr, k_out_ptr, cache_ptr, values_ptr,
                        value_cache_ptr, positions_ptr, inv_freq_ptr, lane_ptr, page_table_ptr,
                        n_rows, q_heads, k_heads, head_dim, rotary_dim, attention_factor, q_eps, q_weight_offset,
                        k_eps, k_weight_offset, page_tokens, max_pages, Q_NORM: tl.constexpr,
                        K_NORM: tl.constexpr, K_WRITE_OUT: tl.constexpr, K_WRITE_CACHE: tl.constexpr,
                        K_WRITE_VALUES: tl.constexpr, ROWS: tl.constexpr, Q_HEADS_BLOCK: tl.constexpr,
                        K_HEADS_BLOCK: tl.constexpr, DIM_BLOCK: tl.constexpr, PDL: tl.constexpr):
    wait_for_prior(PDL)
    # axis 1 picks the tensor: 0 rotates q rows into q_out, 1 does k's part (cache planes included)
    first_row = tl.program_id(0).to(tl.int64) * ROWS
    if tl.program_id(1) == 0:
        _rotate_rows(q_ptr, q_norm_ptr, q_out_ptr, q_out_ptr, q_out_ptr, q_out_ptr, positions_ptr, inv_freq_ptr,
                     lane_ptr, page_table_ptr, first_row, n_rows, q_heads, head_dim, rotary_dim, attention_factor,
                     q_eps, q_weight_offset, page_tokens, max_pages, Q_NORM, True, True, False, False, ROWS,
                     Q_HEADS_BLOCK, DIM_BLOCK)
    else:
        _rotate_rows(k_ptr, k_norm_ptr, k_out_ptr, cache_ptr, values_ptr, value_cache_ptr, positions_ptr,
                     inv_freq_ptr, lane_ptr, page_table_ptr, first_row, n_rows, k_heads, head_dim, rotary_dim,
                     attention_factor, k_eps, k_weight_offset, page_tokens, max_pages, K_NORM, True, K_WRITE_OUT,
                     K_WRITE_CACHE, K_WRITE_VALUES, ROWS, K_HEADS_BLOCK, DIM_BLOCK)


@dataclass(frozen=True, slots=True)
class HeadNorm:
    """A `head_rms_norm` run in a rotary launch's prologue: its weight `[head_dim]`, eps, weight offset."""

    weight: torch.Tensor
    eps: float
    weight_offset: float = 0.0

    def __post_init__(self) -> None:
        if self.weight.dim() != 1 or not self.eps > 0:
            raise ValueError(f"HeadNorm needs a 1-D weight and eps > 0, got weight {tuple(self.weight.shape)}, "
                             f"eps {self.eps}")


def _blocks(rows: int, heads: int, head_dim: int, cuda: bool, rows_per_program: int | None = None
            ) -> tuple[int, int, int]:
    """(heads block, feature block, rows a program); `rows_per_program` (a power of two) overrides the
    device's choice (the GPU-paths mode: several programs of several rows)."""
    heads_block, dim_block = triton.next_power_of_2(heads), triton.next_power_of_2(head_dim)
    # NOTE: one row a program on a GPU; a block of rows in the CPU interpreter (milliseconds a program).
    per_program = 1 if cuda else max(1, min(triton.next_power_of_2(rows), 16384 // (heads_block * dim_block)))
    if rows_per_program is not None:
        per_program = rows_per_program
    return heads_block, dim_block, per_program


def _check(x: torch.Tensor, head_dim: int, norm: HeadNorm | None, cache: torch.Tensor | None,
           values: torch.Tensor | None, value_cache: torch.Tensor | None) -> None:
    if norm is not None and norm.weight.shape != (head_dim,):
        raise ValueError(f"rotary_cache: the head norm's weight must have head_dim {head_dim} entries, "
                         f"got {tuple(norm.weight.shape)}")
    if values is not None and (cache is None or value_cache is None or values.shape != x.shape
                               or value_cache.shape != cache.shape):
        raise ValueError("rotary_cache: values need a cache write and a value_cache shaped like cache, "
                         f"got values {tuple(values.shape)} for x {tuple(x.shape)}")


def rotary_cache(x: torch.Tensor, positions: torch.Tensor, *, head_dim: int,
                 inv_freq: torch.Tensor | None = None, rotary_dim: int = 0, attention_factor: float = 1.0,
                 norm: HeadNorm | None = None, out: torch.Tensor | None = None, cache: torch.Tensor | None = None,
                 token_lane: torch.Tensor | None = None, page_table: torch.Tensor | None = None,
                 values: torch.Tensor | None = None, value_cache: torch.Tensor | None = None,
                 rows_per_program: int | None = None) -> None:
    """Normalize each head of `x` (when `norm` is given), rotate it (when `inv_freq` is given) into
    `out` and/or write it into the cache plane `cache`; `values` (unrotated, `x`'s shape) go to the
    same slots of `value_cache`. `rows_per_program` overrides the device's tile (`_blocks`)."""
    _check(x, head_dim, norm, cache, values, value_cache)
    rows, width = x.shape
    heads = width // head_dim
    rotate, write_cache, write_values = inv_freq is not None, cache is not None, values is not None
    page_tokens = cache.shape[1] if write_cache else 1
    max_pages = page_table.shape[1] if write_cache else 1
    heads_block, dim_block, per_program = _blocks(rows, heads, head_dim, x.is_cuda, rows_per_program)
    _rotary_cache_kernel[(triton.cdiv(rows, per_program),)](
        x, positions, inv_freq if rotate else x, norm.weight if norm else x, out if out is not None else x,
        cache if write_cache else x, values if write_values else x, value_cache if write_values else x,
        token_lane if write_cache else positions, page_table if write_cache else positions,
        rows, heads, head_dim, rotary_dim, float(attention_factor), float(norm.eps if norm else 0.0),
        float(norm.weight_offset if norm else 0.0), page_tokens, max_pages,
        NORM=norm is not None, ROTATE=rotate, WRITE_OUT=out is not None, WRITE_CACHE=write_cache,
        WRITE_VALUES=write_values, ROWS=per_program, HEADS_BLOCK=heads_block, DIM_BLOCK=dim_block,
        **dependent(x),
    )


def rotary_pair(q: torch.Tensor, q_out: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, *, head_dim: int,
                inv_freq: torch.Tensor, rotary_dim: int, attention_factor: float, q_norm: HeadNorm | None = None,
                k_norm: HeadNorm | None = None, k_out: torch.Tensor | None = None, cache: torch.Tensor | None = None,
                token_lane: torch.Tensor | None = None, page_table: torch.Tensor | None = None,
                values: torch.Tensor | None = None, value_cache: torch.Tensor | None = None,
                rows_per_program: int | None = None) -> None:
    """Two rotary launches over the same rows as one: `q` (head norm `q_norm`) rotated into `q_out`,
    and `k` as `rotary_cache` treats it (head norm `k_norm`, `k_out`, `cache`, `values`); one rope."""
    _check(q, head_dim, q_norm, None, None, None)
    _check(k, head_dim, k_norm, cache, values, value_cache)
    rows = q.shape[0]
    if k.shape[0] != rows:
        raise ValueError(f"rotary_pair: q has {rows} rows, k {k.shape[0]}")
    q_heads, k_heads = q.shape[1] // head_dim, k.shape[1] // head_dim
    write_cache, write_values = cache is not None, values is not None
    page_tokens = cache.shape[1] if write_cache else 1
    max_pages = page_table.shape[1] if write_cache else 1
    _, dim_block, per_program = _blocks(rows, max(q_heads, k_heads), head_dim, q.is_cuda, rows_per_program)
    _rotary_pair_kernel[(triton.cdiv(rows, per_program), 2)](
        q, q_norm.weight if q_norm else q, q_out, k, k_norm.weight if k_norm else k,
        k_out if k_out is not None else k, cache if write_cache else k, values if write_values else k,
        value_cache if write_values else k, positions, inv_freq, token_lane if write_cache else positions,
        page_table if write_cache else positions, rows, q_heads, k_heads, head_dim, rotary_dim,
        float(attention_factor), float(q_norm.eps if q_norm else 0.0), float(q_norm.weight_offset if q_norm else 0.0),
        float(k_norm.eps if k_norm else 0.0), float(k_norm.weight_offset if k_norm else 0.0), page_tokens, max_pages,
        Q_NORM=q_norm is not None, K_NORM=k_norm is not None, K_WRITE_OUT=k_out is not None,
        K_WRITE_CACHE=write_cache, K_WRITE_VALUES=write_values, ROWS=per_program,
        Q_HEADS_BLOCK=triton.next_power_of_2(q_heads), K_HEADS_BLOCK=triton.next_power_of_2(k_heads),
        DIM_BLOCK=dim_block, **dependent(q),
    )
