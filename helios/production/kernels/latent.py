"""Latent attention (device side): causal attention of packed rows over a paged latent history in the
absorbed form (multi-head latent attention), flash-style online softmax, split along the context.

Every head reads the same record of a position: the latent `c` [L] and the rotary key `k_rope` [R],
one cache plane each ([pages, T, 1, L] and [pages, T, 1, R]). One program owns one packed query row,
a block of HEAD_BLOCK heads (padded to 16 rows for `tl.dot`) and one context split:

    keys of row t (lane l, position p):  j in [0, p]
    s_hj = scale * (q_latent[t, h] . c_j + q_rope[t, h] . k_rope_j)
    out[t, h] = sum_j softmax_j(s_h) c_j            (the output stays in the latent space)

With S = 1 the program normalizes and stores its rows directly; with S > 1 it stores its unnormalized
partial (running max m, sum l, accumulator) and `attention._combine_kernel` merges the splits, as in
paged attention. Padding rows (token_lane < 0) give zeros.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from helios.production.kernels.attention import _combine_kernel, dim_block


@triton.jit
def _latent_kernel(ql_ptr, qr_ptr, c_ptr, kr_ptr, lane_ptr, positions_ptr, page_table_ptr, out_ptr,
                   part_acc_ptr, part_m_ptr, part_l_ptr,
                   heads, latent, rope, page_tokens, max_pages, scale,
                   LATENT_BLOCK: tl.constexpr, ROPE_BLOCK: tl.constexpr, HEAD_BLOCK: tl.constexpr,
                   BLOCK_N: tl.constexpr, SPLITS: tl.constexpr, LOW_PRECISION_PV: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    head_block = tl.program_id(1)
    split = tl.program_id(2)
    head = head_block * HEAD_BLOCK + tl.arange(0, HEAD_BLOCK)
    head_mask = head < heads
    d = tl.arange(0, LATENT_BLOCK)
    d_mask = d < latent
    r = tl.arange(0, ROPE_BLOCK)
    r_mask = r < rope
    n = tl.arange(0, BLOCK_N)
    lane = tl.load(lane_ptr + row)
    position = tl.load(positions_ptr + row)
    last = tl.where(lane >= 0, position + 1, 0)  # exclusive end; no keys for padding rows
    chunk = ((last + SPLITS - 1) // SPLITS + BLOCK_N - 1) // BLOCK_N * BLOCK_N
    lo = split * chunk
    hi = tl.minimum(lo + chunk, last)
    safe_lane = tl.maximum(lane, 0).to(tl.int64)
    q_latent = tl.load(ql_ptr + row * heads * latent + head[:, None] * latent + d[None, :],
                       mask=head_mask[:, None] & d_mask[None, :], other=0.0)
    q_rope = tl.load(qr_ptr + row * heads * rope + head[:, None] * rope + r[None, :],
                     mask=head_mask[:, None] & r_mask[None, :], other=0.0)
    m_i = tl.full((HEAD_BLOCK,), float("-inf"), tl.float32)
    l_i = tl.zeros((HEAD_BLOCK,), tl.float32)
    acc = tl.zeros((HEAD_BLOCK, LATENT_BLOCK), tl.float32)
    for start in range(lo, hi, BLOCK_N):
        j = start + n
        valid = j < hi
        page = tl.load(page_table_ptr + safe_lane * max_pages + j // page_tokens, mask=valid, other=0).to(tl.int64)
        slot = page * page_tokens + j % page_tokens
        c = tl.load(c_ptr + slot[:, None] * latent + d[None, :], mask=valid[:, None] & d_mask[None, :], other=0.0)
        k_rope = tl.load(kr_ptr + slot[:, None] * rope + r[None, :], mask=valid[:, None] & r_mask[None, :],
                         other=0.0)
        if LOW_PRECISION_PV:  # bf16/f16 products are exact in the FP32 accumulator
            s = tl.dot(q_latent, tl.trans(c)) + tl.dot(q_rope, tl.trans(k_rope))
        else:
            s = (tl.dot(q_latent, tl.trans(c), input_precision="ieee")
                 + tl.dot(q_rope, tl.trans(k_rope), input_precision="ieee"))
        s = tl.where(valid[None, :], s * scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if LOW_PRECISION_PV:
            pv = tl.dot(p.to(c.dtype), c)
        else:
            pv = tl.dot(p, c.to(tl.float32), input_precision="ieee")
        acc = acc * alpha[:, None] + pv
        m_i = m_new
    if SPLITS == 1:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(out_ptr + row * heads * latent + head[:, None] * latent + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=head_mask[:, None] & d_mask[None, :])
    else:
        part = (row * heads + head) * SPLITS + split
        tl.store(part_m_ptr + part, m_i, mask=head_mask)
        tl.store(part_l_ptr + part, l_i, mask=head_mask)
        tl.store(part_acc_ptr + part[:, None] * LATENT_BLOCK + d[None, :], acc, mask=head_mask[:, None])


HEAD_BLOCK = 16  # query heads a program: the smallest tl.dot tile


def latent_attention(q_latent: torch.Tensor, q_rope: torch.Tensor, latent_cache: torch.Tensor,
                     rope_cache: torch.Tensor, token_lane: torch.Tensor, positions: torch.Tensor,
                     page_table: torch.Tensor, out: torch.Tensor, *, scale: float, splits: int = 1,
                     scratch: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
                     block_n: int = 32) -> None:
    """Latent attention of each packed row over its lane's records (docs/operators.md). With
    `splits` > 1, `scratch` is `attention.split_scratch(rows, heads, L, splits)`."""
    rows = q_latent.shape[0]
    _, page_tokens, _, latent = latent_cache.shape
    rope = rope_cache.shape[3]
    heads = q_latent.shape[1] // latent
    if splits > 1 and scratch is None:
        raise ValueError("latent_attention with splits > 1 needs its static scratch (attention.split_scratch)")
    acc, m, l_s = scratch if scratch is not None else (out, out, out)
    _latent_kernel[(rows, triton.cdiv(heads, HEAD_BLOCK), splits)](
        q_latent, q_rope, latent_cache, rope_cache, token_lane, positions, page_table, out, acc, m, l_s,
        heads, latent, rope, page_tokens, page_table.shape[1], float(scale),
        LATENT_BLOCK=dim_block(latent), ROPE_BLOCK=dim_block(rope), HEAD_BLOCK=HEAD_BLOCK, BLOCK_N=block_n,
        SPLITS=splits, LOW_PRECISION_PV=latent_cache.dtype != torch.float32,
    )
    if splits > 1:
        _combine_kernel[(rows, heads)](out, acc, m, l_s, heads, latent, DIM_BLOCK=dim_block(latent), SPLITS=splits,
                                       PDL=0)
