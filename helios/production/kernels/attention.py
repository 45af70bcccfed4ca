"""Paged attention (device side): causal, grouped-query, per-lane query lengths, optional sliding window
and soft-cap, flash-style online softmax. Two kernels compute the same operator (docs/operators.md).

The per-row kernel (`_attention_kernel`, decode-sized graphs): one program owns one packed query row,
one kv head (all `group = heads / kv_heads` query heads that read it, padded to 16 rows for `tl.dot`)
and one context split:

    keys of row t (lane l, position p):  j in [first, p],  first = 0 or max(0, p - W + 1)
    split s of S covers j in [first + s * chunk, first + (s + 1) * chunk) ∩ [first, p]

With S = 1 the program normalizes and stores its output row directly. With S > 1 it stores its
unnormalized partial (running max m, sum l, accumulator) and `_combine_kernel` merges the splits:
out = Σ_s e^(m_s - M) acc_s / Σ_s e^(m_s - M) l_s. Decode at small batch uses S > 1 so that a long
context still spreads over the GPU.

The tiled kernel (`_tiled_attention_kernel`, graphs of many rows: prefill chunks): every row of a
prefill chunk reads the same history, so one program owns a tile of BLOCK_M consecutive packed rows
and one kv head, and loads each key block once for all BLOCK_M * group query rows of the tile:

    packed rows   [ tile 0: rows 0..M-1 | tile 1: rows M..2M-1 | ... ]     grid (kv_heads, tiles)
    query row i of a program = (row tile*M + i // GROUP_BLOCK, head kv_head*group + i % GROUP_BLOCK)
    keys walked   j in [min over the tile's rows of first, max over them of p]
    per row i     keys outside [first_i, p_i] are masked to -inf (causal, window)

A tile is *single-lane* when its live rows (token_lane >= 0) all belong to one lane, or it has none.
Packing (helios/runtime/packing.py) lays a lane's rows consecutively, so in a prefill round every
tile but those at a lane boundary is single-lane. The tiled kernel computes the single-lane tiles
only; the rows of every other tile (lane boundaries, MIXED rounds' decode rows next to a prefill
chunk) go to the per-row kernel, launched with TILE_ROWS = BLOCK_M, whose programs skip the rows of
single-lane tiles (both kernels decide with `_single_lane_tile`, so each row is stored by exactly
one of them). This is correct for any lanes and positions (nothing assumes sorted positions), and a
mixed tile costs what it cost before, in parallel, instead of serializing its lanes in one program.
Tiled launches use one context split (S = 1). Padding rows (token_lane < 0) give zeros in both.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from helios.production.kernels.launch import dependent, wait_for_prior


@triton.jit
def _single_lane_tile(lane_ptr, tile, rows, BLOCK_M: tl.constexpr):
    """Whether the live rows (token_lane >= 0) of packed-row tile `tile` all belong to one lane (or
    none is live): such a tile is the tiled kernel's, every other row the per-row kernel's."""
    r = tile.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    lane = tl.load(lane_ptr + r, mask=r < rows, other=-1)
    live = lane >= 0
    lowest = tl.min(tl.where(live, lane, 2147483647), axis=0)
    highest = tl.max(tl.where(live, lane, -1), axis=0)
    return (highest < 0) | (lowest == highest)


@triton.jit
def _attention_kernel(q_ptr, k_ptr, v_ptr, lane_ptr, positions_ptr, page_table_ptr, out_ptr,
                      part_acc_ptr, part_m_ptr, part_l_ptr,
                      rows, heads, kv_heads, group, page_tokens, max_pages, scale, window, softcap,
                      head_dim, DIM_BLOCK: tl.constexpr, GROUP_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr,
                      SPLITS: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
                      LOW_PRECISION_PV: tl.constexpr, USE_DOT: tl.constexpr, TILE_ROWS: tl.constexpr,
                      PDL: tl.constexpr):
    wait_for_prior(PDL)
    row = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    g = tl.arange(0, GROUP_BLOCK)
    d = tl.arange(0, DIM_BLOCK)
    d_mask = d < head_dim
    n = tl.arange(0, BLOCK_N)
    head = kv_head * group + g
    lane = tl.load(lane_ptr + row)
    position = tl.load(positions_ptr + row)
    stored_heads = group
    if TILE_ROWS > 0:  # beside the tiled kernel: the rows of single-lane tiles are its (S = 1 here)
        theirs = _single_lane_tile(lane_ptr, row // TILE_ROWS, rows, TILE_ROWS)
        lane = tl.where(theirs, -1, lane)  # no keys, no store
        stored_heads = tl.where(theirs, 0, group)
    head_mask = g < stored_heads
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
def _tiled_block(q, k_ptr, v_ptr, page_table_ptr, safe_lane, start, hi, first, last, m_i, l_i, acc, kv_head,
                 width, page_tokens, max_pages, scale_log2, softcap, head_dim, n, d, d_mask,
                 MASKED: tl.constexpr, HAS_SOFTCAP: tl.constexpr, LOW_PRECISION_PV: tl.constexpr):
    """One block of BLOCK_N keys from `start` folded into the tile's running (m_i, l_i, acc), in base 2:
    scores times log2(e), so exp2 of their differences is exp of the natural ones. MASKED: the block
    holds keys some query row must not see (causal end, window start, the context's end)."""
    j = start + n
    if MASKED:
        valid = j < hi
        page = tl.load(page_table_ptr + safe_lane * max_pages + j // page_tokens, mask=valid, other=0).to(tl.int64)
        kv_mask = valid[:, None] & d_mask[None, :]
    else:
        page = tl.load(page_table_ptr + safe_lane * max_pages + j // page_tokens).to(tl.int64)
        kv_mask = d_mask[None, :]
    slot = page * page_tokens + j % page_tokens
    offsets = slot[:, None] * width + kv_head * head_dim + d[None, :]
    k = tl.load(k_ptr + offsets, mask=kv_mask, other=0.0)
    if LOW_PRECISION_PV:
        s = tl.dot(q, tl.trans(k))
    else:
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
    if HAS_SOFTCAP:
        s = s * (scale_log2 / 1.4426950408889634)
        s = softcap * (1.0 - 2.0 / (tl.exp(2.0 * s / softcap) + 1.0)) * 1.4426950408889634
    else:
        s = s * scale_log2
    if MASKED:
        keep = (j[None, :] >= first[:, None]) & (j[None, :] < last[:, None])
        s = tl.where(keep, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    if MASKED:
        # NOTE: a query row may have no key in this block yet (causal, window, padding): its max
        # stays -inf, and subtracting 0 instead keeps 2^(s - m) at 0 rather than NaN.
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    alpha = tl.exp2(m_i - m_use)
    p = tl.exp2(s - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    v = tl.load(v_ptr + offsets, mask=kv_mask, other=0.0)
    # the rescaled accumulator is the product's addend: no second tile of registers for p @ v
    acc = acc * alpha[:, None]
    if LOW_PRECISION_PV:
        acc = tl.dot(p.to(v.dtype), v, acc)
    else:
        acc = tl.dot(p, v.to(tl.float32), acc, input_precision="ieee")
    return m_new, l_i, acc


@triton.jit
def _tiled_attention_kernel(q_ptr, k_ptr, v_ptr, lane_ptr, positions_ptr, page_table_ptr, out_ptr,
                            rows, heads, kv_heads, group, page_tokens, max_pages, scale, window, softcap,
                            head_dim, DIM_BLOCK: tl.constexpr, GROUP_BLOCK: tl.constexpr, BLOCK_M: tl.constexpr,
                            BLOCK_N: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
                            LOW_PRECISION_PV: tl.constexpr, PDL: tl.constexpr):
    wait_for_prior(PDL)
    # the last tiles see the longest histories: programs take them first, so the short ones fill the
    # GPU's tail instead of the long ones running alone at the end. The GPU starts programs in the
    # order of their linear index (axis 0 fastest), so the kv head is axis 0: every head's longest
    # tile starts before any head's shorter one (longest-processing-time-first across the heads; with
    # the tile on axis 0, a 2,048-row causal prefill of 8 kv heads on 132 SMs took 51 key blocks on
    # its busiest SM where 32 is the even share)
    kv_head = tl.program_id(0)
    tile = tl.num_programs(1) - 1 - tl.program_id(1)
    if _single_lane_tile(lane_ptr, tile, rows, BLOCK_M):
        i = tl.arange(0, BLOCK_M * GROUP_BLOCK)  # query rows: BLOCK_M packed rows x GROUP_BLOCK heads
        row = tile.to(tl.int64) * BLOCK_M + i // GROUP_BLOCK
        g = i % GROUP_BLOCK
        head = kv_head * group + g
        in_rows = row < rows
        d = tl.arange(0, DIM_BLOCK)
        d_mask = d < head_dim
        n = tl.arange(0, BLOCK_N)
        lane = tl.load(lane_ptr + row, mask=in_rows, other=-1)
        position = tl.load(positions_ptr + row, mask=in_rows, other=0)
        live = lane >= 0
        first = tl.zeros_like(position)
        if HAS_WINDOW:
            first = tl.maximum(position - window + 1, 0)
        last = tl.where(live, position + 1, 0)  # exclusive end; no keys for padding rows
        hi = tl.max(last, axis=0)
        lo = tl.minimum(tl.min(tl.where(live, first, 2147483647), axis=0), hi)
        # keys [lo, full_hi) are visible to every live row: whole blocks of them run without masks
        # (padding rows see them too and are stored as zeros); a window makes every block masked
        full_hi = lo
        if not HAS_WINDOW:
            seen_by_all = tl.minimum(tl.min(tl.where(live, last, 2147483647), axis=0), hi)  # hi: none live
            full_hi = lo + (tl.maximum(seen_by_all - lo, 0) // BLOCK_N) * BLOCK_N
        safe_lane = tl.maximum(tl.max(lane, axis=0), 0).to(tl.int64)  # the tile's one lane
        q_mask = (in_rows & (g < group))[:, None] & d_mask[None, :]
        q_offsets = row[:, None] * heads * head_dim + head[:, None] * head_dim + d[None, :]
        q = tl.load(q_ptr + q_offsets, mask=q_mask, other=0.0)
        width = kv_heads * head_dim
        scale_log2 = scale * 1.4426950408889634
        m_i = tl.full((BLOCK_M * GROUP_BLOCK,), float("-inf"), tl.float32)
        l_i = tl.zeros((BLOCK_M * GROUP_BLOCK,), tl.float32)
        acc = tl.zeros((BLOCK_M * GROUP_BLOCK, DIM_BLOCK), tl.float32)
        for start in range(lo, full_hi, BLOCK_N):
            m_i, l_i, acc = _tiled_block(q, k_ptr, v_ptr, page_table_ptr, safe_lane, start, hi, first, last, m_i,
                                         l_i, acc, kv_head, width, page_tokens, max_pages, scale_log2, softcap,
                                         head_dim, n, d, d_mask, False, HAS_SOFTCAP, LOW_PRECISION_PV)
        for start in range(full_hi, hi, BLOCK_N):
            m_i, l_i, acc = _tiled_block(q, k_ptr, v_ptr, page_table_ptr, safe_lane, start, hi, first, last, m_i,
                                         l_i, acc, kv_head, width, page_tokens, max_pages, scale_log2, softcap,
                                         head_dim, n, d, d_mask, True, HAS_SOFTCAP, LOW_PRECISION_PV)
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        out = tl.where(live[:, None], out, 0.0)
        tl.store(out_ptr + q_offsets, out.to(out_ptr.dtype.element_ty), mask=q_mask)


@triton.jit
def _combine_kernel(out_ptr, part_acc_ptr, part_m_ptr, part_l_ptr, heads, head_dim,
                    DIM_BLOCK: tl.constexpr, SPLITS: tl.constexpr, PDL: tl.constexpr):
    wait_for_prior(PDL)
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


@dataclass(frozen=True, slots=True)
class QueryTile:
    """How the tiled kernel walks a round: `block_m` consecutive packed rows a program (times the
    group's query heads, padded to a power of two: the rows of its `tl.dot`), `block_n` keys a
    program iteration, warps and pipeline stages."""

    block_m: int = 16
    block_n: int = 64
    num_warps: int = 4
    num_stages: int | None = None  # None: Triton's default

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n"):
            value = getattr(self, name)
            if value < 16 or value & (value - 1):
                raise ValueError(f"QueryTile.{name} must be a power of two >= 16 (tl.dot), got {value}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"QueryTile.num_warps must be 1, 2, 4, 8 or 16, got {self.num_warps}")
        if self.num_stages is not None and not 1 <= self.num_stages <= 6:
            raise ValueError(f"QueryTile.num_stages must be in 1..6, got {self.num_stages}")


# The graph row capacity from which attention runs tiled over query rows (`choose_query_tile`).
TILED_ROWS_CUDA = 128
TILED_ROWS_CPU = 16


def choose_query_tile(rows: int, group: int, *, cuda: bool, lane_rows: int | None = None) -> QueryTile | None:
    """The tiled kernel's tile for a graph of `rows` packed rows, or None: the per-row kernel alone.

    Rule: a graph of at least TILED_ROWS_CUDA rows (PREFILL and MIXED chunks) runs tiled on a GPU.
    Below it a round is decode-sized: too few rows share a lane for tiles to save reads, and the
    per-row kernel's context splits keep the GPU busy. Where the graph's `lane_rows` (the most rows
    one request holds in a round: one in DECODE, the verify width in SPECULATIVE) is below the tile's
    rows, a tile is single-lane only where one lane's rows sit beside padding, so the per-row kernel
    runs alone (before, a 256-lane DECODE graph launched the tiled kernel at every layer for
    programs that found their tiles mixed and returned). On a GPU the tile
    aims at 128 query rows a program (`block_m` * group), as flash attention's forward does; on an
    H100 at 2,048 rows it was within 1% of the best of 36 tiles swept (BENCHMARKS.md). On the CPU interpreter, where each program iteration costs about 5 ms, fewer larger
    programs are faster, so graphs of TILED_ROWS_CPU rows or more take it with wide tiles."""
    group_block = triton.next_power_of_2(group)
    if cuda:
        if rows < TILED_ROWS_CUDA:
            return None
        block_m = max(16, 128 // group_block)
        tile = QueryTile(block_m=block_m, block_n=64, num_warps=8 if block_m * group_block >= 128 else 4)
    elif rows < TILED_ROWS_CPU:
        return None
    else:
        tile = QueryTile(block_m=max(16, min(64, triton.next_power_of_2(rows)) // group_block), block_n=64)
    return None if lane_rows is not None and lane_rows < tile.block_m else tile


def paged_attention(q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, token_lane: torch.Tensor,
                    positions: torch.Tensor, page_table: torch.Tensor, out: torch.Tensor, *, scale: float,
                    sliding_window: int | None = None, softcap: float | None = None, splits: int = 1,
                    scratch: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
                    tile: AttentionTile | None = None, query_tile: QueryTile | None = None,
                    one_lane: bool = False) -> None:
    """Attention of each packed row of `q` over its lane's cached history (docs/operators.md).
    `tile` (default: 64 keys, four warps, tensor cores) sets how the per-row kernel walks the context;
    with `query_tile` the tiled kernel computes the single-lane tiles of `query_tile.block_m` rows and
    the per-row kernel (one split) the rows of the others. `one_lane` (with `query_tile`): the caller
    guarantees every live row carries the same `token_lane` (a graph of one request), so every tile is
    single-lane and the per-row kernel, which would find no row of its own, is not launched."""
    tile = tile or AttentionTile()
    rows = q.shape[0]
    _, page_tokens, kv_heads, head_dim = key_cache.shape
    heads = q.shape[1] // head_dim
    group = heads // kv_heads
    if splits > 1 and scratch is None:
        raise ValueError("paged_attention with splits > 1 needs its static scratch (split_scratch)")
    if splits > 1 and query_tile is not None:
        raise ValueError("paged_attention with a query_tile runs one context split, got splits > 1")
    acc, m, l_s = scratch if scratch is not None else (out, out, out)
    common = (heads, kv_heads, group, page_tokens, page_table.shape[1], float(scale),
              int(sliding_window or 0), float(softcap or 1.0), head_dim)
    if not (one_lane and query_tile is not None):
        _attention_kernel[(rows, kv_heads, splits)](
            q, key_cache, value_cache, token_lane, positions, page_table, out, acc, m, l_s, rows, *common,
            DIM_BLOCK=dim_block(head_dim),
            GROUP_BLOCK=max(16 if tile.dot else 1, triton.next_power_of_2(group)), BLOCK_N=tile.block_n,
            SPLITS=splits, HAS_WINDOW=sliding_window is not None, HAS_SOFTCAP=softcap is not None,
            LOW_PRECISION_PV=key_cache.dtype != torch.float32, USE_DOT=tile.dot,
            TILE_ROWS=0 if query_tile is None else query_tile.block_m,
            num_warps=tile.num_warps, **({} if tile.num_stages is None else {"num_stages": tile.num_stages}),
            **dependent(q),
        )
    if query_tile is not None:
        stages = {} if query_tile.num_stages is None else {"num_stages": query_tile.num_stages}
        _tiled_attention_kernel[(kv_heads, triton.cdiv(rows, query_tile.block_m))](
            q, key_cache, value_cache, token_lane, positions, page_table, out, rows, *common,
            DIM_BLOCK=dim_block(head_dim), GROUP_BLOCK=triton.next_power_of_2(group),
            BLOCK_M=query_tile.block_m, BLOCK_N=query_tile.block_n, HAS_WINDOW=sliding_window is not None,
            HAS_SOFTCAP=softcap is not None, LOW_PRECISION_PV=key_cache.dtype != torch.float32,
            num_warps=query_tile.num_warps, **stages, **dependent(q),
        )
    if splits > 1:
        _combine_kernel[(rows, heads)](out, acc, m, l_s, heads, head_dim, DIM_BLOCK=dim_block(head_dim),
                                       SPLITS=splits, **dependent(out))
