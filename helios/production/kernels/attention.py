"""Paged attention (device side): causal, grouped-query, per-lane query lengths, optional sliding window
and soft-cap, flash-style online softmax, split along the context for long histories.

One program owns one packed query row, one kv head (all `group = heads / kv_heads` query heads that
read it, padded to 16 rows for `tl.dot`) and one context split:

    keys of row t (lane l, position p):  j in [first, p],  first = 0 or max(0, p - W + 1)
    split s of S covers j in [first + s * chunk, first + (s + 1) * chunk) ∩ [first, p]

With S = 1 the program normalizes and stores its output row directly. With S > 1 it stores its
unnormalized partial (running max m, sum l, accumulator) and `_combine_kernel` merges the splits:
out = Σ_s e^(m_s - M) acc_s / Σ_s e^(m_s - M) l_s. Prefill, decode and mixed submissions are the same
rule; decode at small batch uses S > 1 so that a long context still spreads over the GPU.
Padding rows (token_lane < 0) give zeros.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@triton.jit
def _attention_kernel(q_ptr, k_ptr, v_ptr, lane_ptr, positions_ptr, page_table_ptr, out_ptr,
                      part_acc_ptr, part_m_ptr, part_l_ptr,
                      heads, kv_heads, group, page_tokens, max_pages, scale, window, softcap,
                      head_dim, DIM_BLOCK: tl.constexpr, GROUP_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr,
                      SPLITS: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
                      LOW_PRECISION_PV: tl.constexpr, USE_DOT: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    g = tl.arange(0, GROUP_BLOCK)
    d = tl.arange(0, DIM_BLOCK)
    d_mask = d < head_dim
    n = tl.arange(0, BLOCK_N)
    head = kv_head * group + g
    head_mask = g < group
    lane = tl.load(lane_ptr + row)
    position = tl.load(positions_ptr + row)
    first = 0
    if HAS_WINDOW:
        first = tl.maximum(position - window + 1, 0)
    last = tl.where(lane >= 0, position + 1, 0)  # exclusive end; no keys for padding rows
    length = tl.maximum(last - first, 0)
    chunk = ((length + SPLITS - 1) // SPLITS + BLOCK_N - 1) // BLOCK_N * BLOCK_N
    lo = first + split * chunk
    hi = tl.minimum(lo + chunk, last)
    safe_lane = tl.maximum(lane, 0).to(tl.int64)
    q = tl.load(q_ptr + row * heads * head_dim + head[:, None] * head_dim + d[None, :],
                mask=head_mask[:, None] & d_mask[None, :], other=0.0)
    width = kv_heads * head_dim
    m_i = tl.full((GROUP_BLOCK,), float("-inf"), tl.float32)
    l_i = tl.zeros((GROUP_BLOCK,), tl.float32)
    acc = tl.zeros((GROUP_BLOCK, DIM_BLOCK), tl.float32)
    for start in range(lo, hi, BLOCK_N):
        j = start + n
        valid = j < hi
        page = tl.load(page_table_ptr + safe_lane * max_pages + j // page_tokens, mask=valid, other=0).to(tl.int64)
        slot = page * page_tokens + j % page_tokens
        offsets = slot[:, None] * width + kv_head * head_dim + d[None, :]
        kv_mask = valid[:, None] & d_mask[None, :]
        k = tl.load(k_ptr + offsets, mask=kv_mask, other=0.0)
        if not USE_DOT:  # CUDA-core products: no padding of a small group to 16 rows
            s = tl.sum(q.to(tl.float32)[:, None, :] * k.to(tl.float32)[None, :, :], axis=2) * scale
        elif LOW_PRECISION_PV:
            s = tl.dot(q, tl.trans(k)) * scale  # bf16/f16 products are exact in the FP32 accumulator
        else:
            s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        if HAS_SOFTCAP:
            s = softcap * (1.0 - 2.0 / (tl.exp(2.0 * s / softcap) + 1.0))
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + offsets, mask=kv_mask, other=0.0)
        if not USE_DOT:
            pv = tl.sum(p[:, :, None] * v.to(tl.float32)[None, :, :], axis=1)
        elif LOW_PRECISION_PV:
            pv = tl.dot(p.to(v.dtype), v)
        else:
            pv = tl.dot(p, v.to(tl.float32), input_precision="ieee")
        acc = acc * alpha[:, None] + pv
        m_i = m_new
    if SPLITS == 1:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(out_ptr + row * heads * head_dim + head[:, None] * head_dim + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=head_mask[:, None] & d_mask[None, :])
    else:
        part = (row * heads + head) * SPLITS + split
        tl.store(part_m_ptr + part, m_i, mask=head_mask)
        tl.store(part_l_ptr + part, l_i, mask=head_mask)
        tl.store(part_acc_ptr + part[:, None] * DIM_BLOCK + d[None, :], acc, mask=head_mask[:, None])


@triton.jit
def _combine_kernel(out_ptr, part_acc_ptr, part_m_ptr, part_l_ptr, heads, head_dim,
                    DIM_BLOCK: tl.constexpr, SPLITS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    s = tl.arange(0, SPLITS)
    d = tl.arange(0, DIM_BLOCK)
    part = (row * heads + head) * SPLITS + s
    m = tl.load(part_m_ptr + part)
    l_s = tl.load(part_l_ptr + part)
    top = tl.max(m, axis=0)
    weight = tl.where(m > float("-inf"), tl.exp(m - top), 0.0)
    total = tl.sum(weight * l_s, axis=0)
    acc = tl.load(part_acc_ptr + part[:, None] * DIM_BLOCK + d[None, :])
    out = tl.sum(acc * weight[:, None], axis=0) / tl.where(total > 0, total, 1.0)
    tl.store(out_ptr + (row * heads + head) * head_dim + d, out.to(out_ptr.dtype.element_ty), mask=d < head_dim)


def dim_block(head_dim: int) -> int:
    """The padded head width the kernels compute with (a power of two, at least 16 for tl.dot)."""
    return max(16, triton.next_power_of_2(head_dim))


def split_scratch(rows: int, heads: int, head_dim: int, splits: int, device: torch.device | str
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Static partial-result buffers for `splits` > 1: (acc [rows*heads*splits, dim block], m, l)."""
    count = rows * heads * splits
    return (torch.zeros((count, dim_block(head_dim)), dtype=torch.float32, device=device),
            torch.zeros((count,), dtype=torch.float32, device=device),
            torch.zeros((count,), dtype=torch.float32, device=device))


def choose_splits(rows: int, kv_heads: int, context: int, *, target_programs: int = 264,
                  block_n: int = 64) -> int:
    """Context splits for a graph: enough programs to cover the GPU, never a split shorter than a block."""
    by_context = max(1, context // (4 * block_n))
    wanted = max(1, target_programs // max(1, rows * kv_heads))
    splits = 1
    while splits * 2 <= min(wanted, by_context, 64):
        splits *= 2
    return splits


@dataclass(frozen=True, slots=True)
class AttentionTile:
    """How one attention launch walks the context: keys a program iteration, warps, pipeline stages,
    and whether the products run on tensor cores (`tl.dot`, the query group padded to 16 rows) or on
    CUDA cores (the group as it is)."""

    block_n: int = 64
    num_warps: int = 4
    num_stages: int | None = None  # None: Triton's default
    dot: bool = True

    def __post_init__(self) -> None:
        if self.block_n < 16 or self.block_n & (self.block_n - 1):
            raise ValueError(f"AttentionTile.block_n must be a power of two >= 16, got {self.block_n}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"AttentionTile.num_warps must be 1, 2, 4, 8 or 16, got {self.num_warps}")
        if self.num_stages is not None and not 1 <= self.num_stages <= 6:
            raise ValueError(f"AttentionTile.num_stages must be in 1..6, got {self.num_stages}")


def choose_tile(rows: int, group: int, *, cuda: bool) -> AttentionTile:
    """The tile of an attention launch over `rows` packed query rows of `group` query heads per kv
    head. Measured on an H200 (`bench/kernel_tiles.py`, BENCHMARKS.md issue #6 tile sweep; 2 query heads
    a kv head, 128-wide heads): with 64 rows or more, two warps a program read the cache 7-17%
    faster than four (0.88 of the copy bandwidth at 256 rows of 512 tokens, 0.95 at 1,024 tokens);
    tensor-core products beat CUDA-core ones everywhere, padding included; with few rows (split
    contexts) the tile makes no measurable difference. The CPU interpreter takes the default."""
    del group
    if cuda and rows >= 16:
        return AttentionTile(block_n=64, num_warps=2)
    return AttentionTile()


def paged_attention(q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, token_lane: torch.Tensor,
                    positions: torch.Tensor, page_table: torch.Tensor, out: torch.Tensor, *, scale: float,
                    sliding_window: int | None = None, softcap: float | None = None, splits: int = 1,
                    scratch: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
                    tile: AttentionTile | None = None) -> None:
    """Attention of each packed row of `q` over its lane's cached history (docs/operators.md).
    `tile` (default: 64 keys, four warps, tensor cores) sets how a program walks the context."""
    tile = tile or AttentionTile()
    rows = q.shape[0]
    _, page_tokens, kv_heads, head_dim = key_cache.shape
    heads = q.shape[1] // head_dim
    group = heads // kv_heads
    if splits > 1 and scratch is None:
        raise ValueError("paged_attention with splits > 1 needs its static scratch (split_scratch)")
    acc, m, l_s = scratch if scratch is not None else (out, out, out)
    _attention_kernel[(rows, kv_heads, splits)](
        q, key_cache, value_cache, token_lane, positions, page_table, out, acc, m, l_s,
        heads, kv_heads, group, page_tokens, page_table.shape[1], float(scale),
        int(sliding_window or 0), float(softcap or 1.0),
        head_dim, DIM_BLOCK=dim_block(head_dim),
        GROUP_BLOCK=max(16 if tile.dot else 1, triton.next_power_of_2(group)), BLOCK_N=tile.block_n,
        SPLITS=splits, HAS_WINDOW=sliding_window is not None, HAS_SOFTCAP=softcap is not None,
        LOW_PRECISION_PV=key_cache.dtype != torch.float32, USE_DOT=tile.dot,
        num_warps=tile.num_warps, **({} if tile.num_stages is None else {"num_stages": tile.num_stages}),
    )
    if splits > 1:
        _combine_kernel[(rows, heads)](out, acc, m, l_s, heads, head_dim, DIM_BLOCK=dim_block(head_dim),
                                       SPLITS=splits)
