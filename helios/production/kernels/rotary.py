"""Rotary embedding fused with the paged cache write (device side).

One kernel, three uses, chosen by constexpr flags:
  - `rotary`: rotate each head of a row and store it (`out`);
  - `paged_cache_write`: store a row's `[kv_heads, head_dim]` into its lane's page slot;
  - both at once: the rotated keys go straight into the cache (and to `out` only when the program
    reads the rotated tensor again), saving a launch and a round trip through memory.

Layouts (docs/operators.md): rows `[P, heads * head_dim]`, cache plane `[pages, T, kv_heads, head_dim]`,
the token at position p of lane l lives at `[page_table[l, p // T], p % T]`. The inverse frequencies
and attention factor are computed once on the host at lowering, exactly as the reference computes them.
One program handles one packed row on a GPU (a block of rows in the CPU interpreter), all heads at once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rotary_cache_kernel(x_ptr, positions_ptr, inv_freq_ptr, out_ptr, cache_ptr, lane_ptr, page_table_ptr,
                         n_rows, heads, head_dim, rotary_dim, attention_factor, page_tokens, max_pages,
                         ROTATE: tl.constexpr, WRITE_OUT: tl.constexpr, WRITE_CACHE: tl.constexpr,
                         ROWS: tl.constexpr, HEADS_BLOCK: tl.constexpr, DIM_BLOCK: tl.constexpr):
    # [ROWS, HEADS_BLOCK, DIM_BLOCK] elements: row r, head h, feature d
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = r < n_rows
    rows = r[:, None, None]
    h = tl.arange(0, HEADS_BLOCK)[None, :, None]
    d = tl.arange(0, DIM_BLOCK)[None, None, :]
    width = heads * head_dim
    mask = (h < heads) & (d < head_dim) & row_mask[:, None, None]
    base = x_ptr + rows * width + h * head_dim
    x = tl.load(base + d, mask=mask, other=0.0).to(tl.float32)
    positions = tl.load(positions_ptr + r, mask=row_mask, other=0)
    if ROTATE:
        half = rotary_dim // 2
        i = tl.where(d < half, d, d - half)
        inv_freq = tl.load(inv_freq_ptr + i, mask=d < rotary_dim, other=0.0)
        angle = positions.to(tl.float32)[:, None, None] * inv_freq
        cos = tl.cos(angle) * attention_factor
        sin = tl.sin(angle) * attention_factor
        partner_d = tl.where(d < half, d + half, d - half)
        partner = tl.load(base + partner_d, mask=mask & (d < rotary_dim), other=0.0).to(tl.float32)
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


def rotary_cache(x: torch.Tensor, positions: torch.Tensor, *, head_dim: int,
                 inv_freq: torch.Tensor | None = None, rotary_dim: int = 0, attention_factor: float = 1.0,
                 out: torch.Tensor | None = None, cache: torch.Tensor | None = None,
                 token_lane: torch.Tensor | None = None, page_table: torch.Tensor | None = None) -> None:
    """Rotate `x` (when `inv_freq` is given) into `out` and/or write it into the cache plane `cache`."""
    rows, width = x.shape
    heads = width // head_dim
    rotate = inv_freq is not None
    write_cache = cache is not None
    page_tokens = cache.shape[1] if write_cache else 1
    max_pages = page_table.shape[1] if write_cache else 1
    heads_block, dim_block = triton.next_power_of_2(heads), triton.next_power_of_2(head_dim)
    # NOTE: one row a program on a GPU; a block of rows in the CPU interpreter (milliseconds a program).
    per_program = 1 if x.is_cuda else max(1, min(triton.next_power_of_2(rows), 16384 // (heads_block * dim_block)))
    _rotary_cache_kernel[(triton.cdiv(rows, per_program),)](
        x, positions, inv_freq if rotate else x, out if out is not None else x,
        cache if write_cache else x, token_lane if write_cache else positions,
        page_table if write_cache else positions,
        rows, heads, head_dim, rotary_dim, float(attention_factor), page_tokens, max_pages,
        ROTATE=rotate, WRITE_OUT=out is not None, WRITE_CACHE=write_cache,
        ROWS=per_program, HEADS_BLOCK=heads_block, DIM_BLOCK=dim_block,
    )
