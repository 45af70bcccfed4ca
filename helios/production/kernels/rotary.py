"""Rotary embedding fused with the paged cache write (device side).

One kernel, three uses, chosen by constexpr flags:
  - `rotary`: rotate each head of a row and store it (`out`);
  - `paged_cache_write`: store a row's `[kv_heads, head_dim]` into its lane's page slot;
  - both at once: the rotated keys go straight into the cache (and to `out` only when the program
    reads the rotated tensor again), saving a launch and a round trip through memory.

Layouts (docs/operators.md): rows `[P, heads * head_dim]`, cache plane `[pages, T, kv_heads, head_dim]`,
the token at position p of lane l lives at `[page_table[l, p // T], p % T]`. The inverse frequencies
and attention factor are computed once on the host at lowering, exactly as the reference computes them.
One program handles one packed row, all heads at once (`[HEADS_BLOCK, HALF_BLOCK]` halves).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rotary_cache_kernel(x_ptr, positions_ptr, inv_freq_ptr, out_ptr, cache_ptr, lane_ptr, page_table_ptr,
                         heads, head_dim, rotary_dim, attention_factor, page_tokens, max_pages,
                         ROTATE: tl.constexpr, WRITE_OUT: tl.constexpr, WRITE_CACHE: tl.constexpr,
                         HEADS_BLOCK: tl.constexpr, DIM_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    width = heads * head_dim
    h = tl.arange(0, HEADS_BLOCK)[:, None]
    d = tl.arange(0, DIM_BLOCK)[None, :]
    mask = (h < heads) & (d < head_dim)
    base = x_ptr + row * width + h * head_dim
    x = tl.load(base + d, mask=mask, other=0.0).to(tl.float32)
    if ROTATE:
        half = rotary_dim // 2
        position = tl.load(positions_ptr + row).to(tl.float32)
        i = tl.where(d < half, d, d - half)
        inv_freq = tl.load(inv_freq_ptr + i, mask=d < rotary_dim, other=0.0)
        angle = position * inv_freq
        cos = tl.cos(angle) * attention_factor
        sin = tl.sin(angle) * attention_factor
        partner_d = tl.where(d < half, d + half, d - half)
        partner = tl.load(base + partner_d, mask=mask & (d < rotary_dim), other=0.0).to(tl.float32)
        rotated_half = tl.where(d < half, -partner, partner)
        x = tl.where(d < rotary_dim, x * cos + rotated_half * sin, x)
    if WRITE_OUT:
        tl.store(out_ptr + row * width + h * head_dim + d, x.to(out_ptr.dtype.element_ty), mask=mask)
    if WRITE_CACHE:
        lane = tl.load(lane_ptr + row)
        if lane >= 0:
            p = tl.load(positions_ptr + row)
            page = tl.load(page_table_ptr + lane.to(tl.int64) * max_pages + p // page_tokens).to(tl.int64)
            slot = page * page_tokens + (p % page_tokens)
            tl.store(cache_ptr + slot * width + h * head_dim + d, x.to(cache_ptr.dtype.element_ty), mask=mask)


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
    _rotary_cache_kernel[(rows,)](
        x, positions, inv_freq if rotate else x, out if out is not None else x,
        cache if write_cache else x, token_lane if write_cache else positions,
        page_table if write_cache else positions,
        heads, head_dim, rotary_dim, float(attention_factor), page_tokens, max_pages,
        ROTATE=rotate, WRITE_OUT=out is not None, WRITE_CACHE=write_cache,
        HEADS_BLOCK=triton.next_power_of_2(heads), DIM_BLOCK=triton.next_power_of_2(head_dim),
    )
