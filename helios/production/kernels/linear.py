"""Skinny matrix products (device side): y[M, N] = x[M, K] @ W[N, K]^T (+ bias) for M <= 16 rows.

Decode rounds multiply a handful of packed rows by every weight of the model, so the product is
bound by reading the weights once; cuBLAS's batch-1 kernels read them at a fraction of the copy
bandwidth. Here each program owns `BLOCK_N` output columns of every row: it walks the whole K extent
in `BLOCK_K`-wide contiguous loads of its weight rows, multiplies them against all M rows of `x` at
once (so each weight is read exactly once per call) and accumulates in FP32. Small `BLOCK_N` gives
enough programs to fill a GPU for N as small as 1024.

One launch covers up to three products of the same input (`linear_launch`: q/k/v, or any matmuls
reading one tensor): the grid is the concatenation of each group's column tiles and each program picks its
group (weight, bias, output, N) from its program id; no weight is concatenated, every output stays
its own contiguous tensor. `gated_launch` computes `act(x @ Wg^T) * (x @ Wu^T)` straight into the
activation output: each program reads the same columns of both weights, rounds each product to the
output dtype (as the unfused matmuls store them) and applies the activation as
`kernels/activation.py` does, so the fusion keeps the program's meaning.

The `*_launch` functions check the operands and pack the arguments once (the lowering binds them at
load); `linear` and `gated_linear` launch once, for tests and one-off calls. Outputs take their
tensor's dtype: an FP32 output (the logits) is stored unrounded. Block sizes come
from the host (`choose_blocks`): small tiles over many programs on a GPU, one or a few large tiles on
a CPU, where the interpreter costs milliseconds per program iteration.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from helios.errors import HeliosError
from helios.production.kernels.activation import ACTIVATION_CODES, activate
from helios.production.kernels.launch import dependent, wait_for_prior

MAX_ROWS = 16  # the most rows (M) these kernels take; larger products stay on torch
MAX_GROUPS = 3
MMA_MIN = 16  # tl.dot takes blocks of at least 16 in every extent
# the tensor-core tiles on a GPU (choose_blocks), from MMA_ROWS rows: (columns a program, K step, stages)
MMA_ROWS = 2
MMA_TILE = (32, 256, 4)
MMA_GATED_TILE = (64, 128, 4)


class LinearShapeError(HeliosError):
    """Operands of a skinny product do not fit the kernel (rows, extents, dtypes or layout)."""


@dataclass(frozen=True, slots=True)
class Blocks:
    """Tile of one skinny-product launch: rows, columns and reduction width a program covers."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    mma: bool = False  # tensor-core products (tl.dot over the transposed tile), else CUDA-core FMAs
    num_stages: int | None = None  # software-pipelined loads in flight (None: Triton's default)

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "block_k", "num_warps"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise LinearShapeError(f"Blocks.{name} must be a positive power of two, got {value}")
        if self.block_m > MAX_ROWS:
            raise LinearShapeError(f"Blocks.block_m is {self.block_m}; the kernel takes at most {MAX_ROWS} rows")
        if self.mma and min(self.block_m, self.block_n, self.block_k) < MMA_MIN:
            raise LinearShapeError(f"a tensor-core tile needs every block of at least {MMA_MIN}, got "
                                   f"{self.block_m} x {self.block_n} x {self.block_k}")
        if self.num_stages is not None and not 1 <= self.num_stages <= 8:
            raise LinearShapeError(f"Blocks.num_stages must be 1..8, got {self.num_stages}")


def choose_blocks(rows: int, columns: int, k: int, *, cuda: bool, gated: bool = False,
                  tensor_cores: bool = False) -> Blocks:
    """Tile for `rows` x `columns` outputs (over all groups) reducing over `k`; `tensor_cores`: the
    operands are 16-bit of one dtype (`tensor_core_operands`), so the MMA kernel may take them.

    GPU: one rule from the tiles `bench/kernel_tiles.py` timed on an H200 inside a CUDA graph with L2
    flushed (BENCHMARKS.md: issue #6's tile sweep for the CUDA-core tiles, issue #16's for the
    tensor-core ones). One row runs on CUDA cores: two columns a program and K in 2,048-wide steps
    where 2,048 divides K (else 1,024) on two warps. From `MMA_ROWS` rows, 16-bit operands run on
    tensor cores, the rows padded to one 16-row MMA side: `MMA_TILE` (columns a program, K step,
    loads in flight), `MMA_GATED_TILE` for a gated product (two weights a program: a narrower K step
    over twice the columns). Other operands of two to eight rows take four columns and 1,024-wide
    steps on four warps; nine to sixteen rows two columns and 512-wide steps, which keeps a gated
    program within 255 registers without spilling. CPU: whole extents in as few programs as
    possible (the interpreter pays per program iteration, not per element).
    """
    if not 1 <= rows <= MAX_ROWS:
        raise LinearShapeError(f"a skinny product takes 1..{MAX_ROWS} rows, got {rows}")
    block_m = triton.next_power_of_2(rows)
    if not cuda:
        block_k = min(triton.next_power_of_2(k), 4096)
        block_n = max(1, min(triton.next_power_of_2(columns), (1 << 20) // (block_m * block_k)))
        return Blocks(block_m, block_n, block_k, 4)
    if tensor_cores and rows >= MMA_ROWS:
        block_n, block_k, stages = MMA_GATED_TILE if gated else MMA_TILE
        block_k = _dividing(min(block_k, max(MMA_MIN, triton.next_power_of_2(k))), k, MMA_MIN)
        return Blocks(MMA_MIN, block_n, block_k, 4, mma=True, num_stages=stages)
    if block_m == 1:
        block_n, block_k, num_warps = 2, (2048 if k % 2048 == 0 else 1024), 2
    else:
        block_n, block_k, num_warps = (4, 1024, 4) if block_m <= 8 else (2, 512, 4)
    block_k = min(block_k, max(128, triton.next_power_of_2(k)))
    return Blocks(block_m, block_n, _dividing(block_k, k, 128), num_warps)


def _dividing(block_k: int, k: int, floor: int) -> int:
    """`block_k`, halved down to `floor` where a width dividing K exists (K = 3072: three 1024-wide
    steps, not 2048 and a masked one), which drops the K masks."""
    divisor = block_k
    while k % divisor and divisor > floor:
        divisor //= 2
    return divisor if k % divisor == 0 else block_k


def tensor_core_operands(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the MMA kernel may take x @ weight^T on a GPU: both 16-bit floats of one dtype (FP32
    operands stay on CUDA cores, where the products keep every bit)."""
    return x.dtype == weight.dtype and x.dtype in (torch.bfloat16, torch.float16)


def small_blocks(rows: int, columns: Sequence[int], k: int) -> Blocks:
    """The tile of the GPU-paths mode (`helios.production.gpu_paths`): the GPU's branches at small
    shapes. Each output group takes at least two column tiles (the last one partial where its width is
    no power of two), so a multi-output launch runs every group at a tile offset; K takes at least two
    steps of a width dividing it where one does (as on a GPU); all rows in one tile. From `MMA_ROWS`
    rows the tile is a tensor-core one, as a GPU's for 16-bit operands (blocks of at least 16, so
    narrow groups may take one tile), software-pipelined over two stages."""
    if not 1 <= rows <= MAX_ROWS or not columns or min(columns) < 1 or k < 1:
        raise LinearShapeError(f"small_blocks: {rows} rows, columns {tuple(columns)}, K = {k}")
    block_n = triton.next_power_of_2(-(-min(columns) // 2))
    block_k = _dividing(max(16, triton.next_power_of_2(k) // 2), k, 16)
    if rows >= MMA_ROWS:
        return Blocks(MMA_MIN, max(block_n, MMA_MIN), max(block_k, MMA_MIN), 4, mma=True, num_stages=2)
    return Blocks(triton.next_power_of_2(rows), block_n, block_k, 4)


# ------------------------------------------------------------------------------------------ kernels

@triton.jit
def _summed(x_ptr, r_ptr, offsets, mask, RESIDUAL: tl.constexpr):
    """FP32 rows of x, or of x + r rounded to x's dtype (as the unfused `add` stores its sum)."""
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    if RESIDUAL:
        x = (x.to(tl.float32) + tl.load(r_ptr + offsets, mask=mask, other=0.0).to(tl.float32))
        x = x.to(x_ptr.dtype.element_ty)
    return x.to(tl.float32)


@triton.jit
def _weights(w_rows, ks, k_extent, EVEN_K: tl.constexpr):
    """FP32 weight block [BLOCK_N, BLOCK_K] at K offsets `ks` (masked past K unless EVEN_K)."""
    if EVEN_K:
        return tl.load(w_rows + ks[None, :]).to(tl.float32)
    return tl.load(w_rows + ks[None, :], mask=ks[None, :] < k_extent, other=0.0).to(tl.float32)


@triton.jit
def _rows_step(x_ptr, x_offsets, x_rows, row_mask, ks, k_extent, r_ptr, s_ptr, nw_ptr, w_offset,
               EVEN_K: tl.constexpr, NORM: tl.constexpr, RESIDUAL: tl.constexpr,
               MAY_STORE_SUM: tl.constexpr, BLOCK_M: tl.constexpr):
    """One K step's FP32 input rows [BLOCK_M, BLOCK_K] of a CUDA-core tile, and (NORM: the rows of
    x [+ r], the sum stored, scaled by the norm weight) their squares [BLOCK_M] (zeros otherwise)."""
    if NORM:
        k_in = ks < k_extent
        x = _summed(x_ptr, r_ptr, x_offsets + ks[None, :], row_mask & k_in[None, :], RESIDUAL)
        if RESIDUAL and MAY_STORE_SUM:
            if tl.program_id(0) == 0:
                tl.store(s_ptr + x_offsets + ks[None, :], x.to(s_ptr.dtype.element_ty),
                         mask=row_mask & k_in[None, :])
        squares = tl.sum(x * x, axis=1)
        scale = tl.load(nw_ptr + ks, mask=k_in, other=0.0).to(tl.float32) + w_offset
        x = x * scale[None, :]
    else:
        if EVEN_K:
            x = tl.load(x_rows + ks[None, :], mask=row_mask, other=0.0).to(tl.float32)
        else:
            x = tl.load(x_rows + ks[None, :], mask=row_mask & (ks[None, :] < k_extent), other=0.0).to(tl.float32)
        squares = tl.zeros((BLOCK_M,), dtype=tl.float32)
    return x, squares


@triton.jit
def _product(x_ptr, stride_x, m_rows, k_extent, w_ptr, stride_w, b_ptr, tile, n_extent,
             r_ptr, s_ptr, nw_ptr, eps, w_offset,
             HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             BLOCK_K: tl.constexpr, MMA: tl.constexpr, PRECISION: tl.constexpr, NORM: tl.constexpr,
             RESIDUAL: tl.constexpr, MAY_STORE_SUM: tl.constexpr, PDL: tl.constexpr):
    """FP32 x[rows] @ W[tile columns]^T (+ bias) as a [BLOCK_M, BLOCK_N] block, and its column indices.

    MMA: tensor cores over the transposed product (W tile @ x^T: the weight columns fill the MMA's
    wide side, the few rows its narrow one), operands in their own dtype, FP32 accumulation; else
    CUDA-core FMAs on FP32 values. NORM (CUDA-core tiles only): the product's input is the RMS norm
    of x (of x + r with RESIDUAL, rounded to x's dtype and stored into s by program 0 where
    MAY_STORE_SUM) by weight nw plus `w_offset`, in one pass: each K step multiplies x * (nw +
    offset) in FP32 into the product and adds x's squares to the row's sum, and the product of each
    row is divided by sqrt(mean square + eps) at the end (the division is one scalar a row).

    `wait_for_prior(PDL)` runs first (PDL > 0: the kernel was launched dependent on its predecessor;
    PDL < 0: the caller has waited already)."""
    if PDL >= 0:
        wait_for_prior(PDL)
    rows = tl.arange(0, BLOCK_M)
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_extent
    # masked columns read row 0 (in bounds) and are never stored; no mask on the hot weight loads
    safe_cols = tl.where(col_mask, cols, 0).to(tl.int64)
    x_offsets = rows[:, None].to(tl.int64) * stride_x
    x_rows = x_ptr + x_offsets
    w_rows = w_ptr + safe_cols[:, None] * stride_w
    row_mask = rows[:, None] < m_rows
    if MMA:
        transposed = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        for k0 in range(0, k_extent, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            if EVEN_K:
                x = tl.load(x_rows + ks[None, :], mask=row_mask, other=0.0)
                w = tl.load(w_rows + ks[None, :])
            else:
                k_mask = ks[None, :] < k_extent
                x = tl.load(x_rows + ks[None, :], mask=row_mask & k_mask, other=0.0)
                w = tl.load(w_rows + ks[None, :], mask=k_mask, other=0.0)
            transposed = tl.dot(w, tl.trans(x), transposed, input_precision=PRECISION)
        acc = tl.trans(transposed)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        squares = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for k0 in range(0, k_extent, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            x, more = _rows_step(x_ptr, x_offsets, x_rows, row_mask, ks, k_extent, r_ptr, s_ptr, nw_ptr,
                                 w_offset, EVEN_K, NORM, RESIDUAL, MAY_STORE_SUM, BLOCK_M)
            w = _weights(w_rows, ks, k_extent, EVEN_K)
            acc += tl.sum(x[:, None, :] * w[None, :, :], axis=2)
            if NORM:
                squares += more
        if NORM:
            acc = acc / tl.sqrt(squares / k_extent + eps)[:, None]
    if HAS_BIAS:
        acc += tl.load(b_ptr + safe_cols)[None, :].to(tl.float32)
    return acc, cols, col_mask


@triton.jit
def _store(out_ptr, stride_out, m_rows, acc, cols, col_mask, BLOCK_M: tl.constexpr):
    rows = tl.arange(0, BLOCK_M)
    mask = (rows[:, None] < m_rows) & col_mask[None, :]
    offsets = rows[:, None].to(tl.int64) * stride_out + cols[None, :]
    tl.store(out_ptr + offsets, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _group(x_ptr, stride_x, m_rows, k_extent, w_ptr, stride_w, b_ptr, out_ptr, stride_out, n_extent, tile,
           r_ptr, s_ptr, nw_ptr, eps, w_offset,
           HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
           BLOCK_K: tl.constexpr, MMA: tl.constexpr, PRECISION: tl.constexpr, NORM: tl.constexpr,
           RESIDUAL: tl.constexpr, PDL: tl.constexpr):
    acc, cols, col_mask = _product(x_ptr, stride_x, m_rows, k_extent, w_ptr, stride_w, b_ptr, tile, n_extent,
                                   r_ptr, s_ptr, nw_ptr, eps, w_offset, HAS_BIAS, EVEN_K, BLOCK_M, BLOCK_N,
                                   BLOCK_K, MMA, PRECISION, NORM, RESIDUAL, True, PDL)
    _store(out_ptr, stride_out, m_rows, acc, cols, col_mask, BLOCK_M)


@triton.jit
def _linear_kernel(x_ptr, stride_x, m_rows, k_extent,
                   w0, sw0, b0, o0, so0, n0, tiles0,
                   w1, sw1, b1, o1, so1, n1, tiles1,
                   w2, sw2, b2, o2, so2, n2,
                   r_ptr, s_ptr, nw_ptr, eps, w_offset,
                   GROUPS: tl.constexpr, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MMA: tl.constexpr,
                   PRECISION: tl.constexpr, NORM: tl.constexpr, RESIDUAL: tl.constexpr, PDL: tl.constexpr):
    pid = tl.program_id(0)  # each program waits for the predecessor inside its group's `_product`
    if pid < tiles0:
        _group(x_ptr, stride_x, m_rows, k_extent, w0, sw0, b0, o0, so0, n0, pid, r_ptr, s_ptr, nw_ptr, eps, w_offset,
               HAS_BIAS, EVEN_K, BLOCK_M, BLOCK_N, BLOCK_K, MMA, PRECISION, NORM, RESIDUAL, PDL)
    else:
        if GROUPS == 2:
            _group(x_ptr, stride_x, m_rows, k_extent, w1, sw1, b1, o1, so1, n1, pid - tiles0,
                   r_ptr, s_ptr, nw_ptr, eps, w_offset,
                   HAS_BIAS, EVEN_K, BLOCK_M, BLOCK_N, BLOCK_K, MMA, PRECISION, NORM, RESIDUAL, PDL)
        if GROUPS == 3:
            if pid < tiles0 + tiles1:
                _group(x_ptr, stride_x, m_rows, k_extent, w1, sw1, b1, o1, so1, n1, pid - tiles0,
                       r_ptr, s_ptr, nw_ptr, eps, w_offset,
                       HAS_BIAS, EVEN_K, BLOCK_M, BLOCK_N, BLOCK_K, MMA, PRECISION, NORM, RESIDUAL, PDL)
            else:
                _group(x_ptr, stride_x, m_rows, k_extent, w2, sw2, b2, o2, so2, n2, pid - tiles0 - tiles1,
                       r_ptr, s_ptr, nw_ptr, eps, w_offset,
                       HAS_BIAS, EVEN_K, BLOCK_M, BLOCK_N, BLOCK_K, MMA, PRECISION, NORM, RESIDUAL, PDL)


@triton.jit
def _gated_kernel(x_ptr, stride_x, m_rows, k_extent, wg, swg, bg, wu, swu, bu, out_ptr, stride_out, n_extent,
                  r_ptr, s_ptr, nw_ptr, eps, w_offset,
                  HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, EVEN_K: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MMA: tl.constexpr,
                  PRECISION: tl.constexpr, NORM: tl.constexpr, RESIDUAL: tl.constexpr, PDL: tl.constexpr):
    pid = tl.program_id(0)
    # the gate's product waits for the predecessor; the up product after it
    g, cols, col_mask = _product(x_ptr, stride_x, m_rows, k_extent, wg, swg, bg, pid, n_extent,
                                 r_ptr, s_ptr, nw_ptr, eps, w_offset,
                                 HAS_BIAS, EVEN_K, BLOCK_M, BLOCK_N, BLOCK_K, MMA, PRECISION, NORM, RESIDUAL, True,
                                 PDL)
    u, cols, col_mask = _product(x_ptr, stride_x, m_rows, k_extent, wu, swu, bu, pid, n_extent,
                                 r_ptr, s_ptr, nw_ptr, eps, w_offset,
                                 HAS_BIAS, EVEN_K, BLOCK_M, BLOCK_N, BLOCK_K, MMA, PRECISION, NORM, RESIDUAL, False,
                                 -1)
    # the unfused matmuls store gate and up in the output dtype: round them there first
    g = g.to(out_ptr.dtype.element_ty).to(tl.float32)
    u = u.to(out_ptr.dtype.element_ty).to(tl.float32)
    _store(out_ptr, stride_out, m_rows, activate(g, ACTIVATION) * u, cols, col_mask, BLOCK_M)


# ------------------------------------------------------------------------------------------ host

def _rows(t: torch.Tensor, what: str) -> torch.Tensor:
    if t.dim() != 2 or t.stride(1) != 1:
        raise LinearShapeError(f"{what} must be a 2-D tensor with unit column stride, got shape "
                               f"{tuple(t.shape)} strides {t.stride()}")
    return t


def _check(x: torch.Tensor, weights: Sequence[torch.Tensor], outs: Sequence[torch.Tensor],
           biases: Sequence[torch.Tensor] | None, columns: Sequence[int]) -> None:
    _rows(x, "x")
    rows, k = x.shape
    if not 1 <= rows <= MAX_ROWS:
        raise LinearShapeError(f"x has {rows} rows; the skinny product takes 1..{MAX_ROWS}")
    for i, (w, out, n) in enumerate(zip(weights, outs, columns, strict=True)):
        _rows(w, f"weight {i}")
        _rows(out, f"output {i}")
        if w.shape[1] != k:
            raise LinearShapeError(f"weight {i} is {tuple(w.shape)}; x has K = {k}")
        if not 1 <= n <= min(w.shape[0], out.shape[1]) or out.shape[0] != rows:
            raise LinearShapeError(f"output {i} is {tuple(out.shape)} for {n} columns of weight "
                                   f"{tuple(w.shape)} over {rows} rows")
        if biases is not None and biases[i].numel() < n:
            raise LinearShapeError(f"bias {i} has {biases[i].numel()} values for {n} columns")
    if len({w.dtype for w in weights}) > 1 or len({o.dtype for o in outs}) > 1:
        raise LinearShapeError("one launch takes weights of one dtype and outputs of one dtype")


@dataclass(frozen=True, slots=True)
class NormPrologue:
    """The product's input is `rms_norm(x [+ residual], weight)`, computed inside the product's one
    pass over K (the norm's output is never stored): each K step multiplies x * (weight + offset)
    into the product in FP32 and adds x's squares to the row's sum, and each output row is divided
    by sqrt(mean square + eps) before the bias (the norm's division is one scalar a row, so it
    commutes with the product). With `residual`, `sum_out = x + residual` (rounded to x's dtype, as
    the unfused add stores it) is what is normalized, stored by program 0. Unlike the unfused norm
    the normalized rows are not rounded to x's dtype before the product: the result agrees with the
    unfused pair within that rounding. CUDA-core tiles only (`Blocks.mma` False)."""

    weight: torch.Tensor  # [K]
    eps: float
    weight_offset: float = 0.0  # the norm multiplies by weight + offset
    residual: torch.Tensor | None = None  # [rows, K], x's layout
    sum_out: torch.Tensor | None = None  # [rows, K], x's layout; given with `residual`

    def arguments(self, x: torch.Tensor) -> list[object]:
        """(residual, sum, weight, eps, offset) kernel arguments for input x, checked."""
        k = x.shape[1]
        if self.weight.dim() != 1 or self.weight.shape[0] != k:
            raise LinearShapeError(f"norm weight is {tuple(self.weight.shape)}; x has K = {k}")
        if (self.residual is None) != (self.sum_out is None):
            raise LinearShapeError("a norm prologue takes a residual and its sum output together")
        if self.residual is None:
            return [x, x, self.weight, float(self.eps), float(self.weight_offset)]
        for name, t in (("residual", self.residual), ("sum output", self.sum_out)):
            if t.shape != x.shape or t.stride() != x.stride() or t.dtype != x.dtype:
                raise LinearShapeError(f"norm {name} is {tuple(t.shape)} {t.dtype} strides {t.stride()}; it "
                                       f"must lay out like x, {tuple(x.shape)} {x.dtype} strides {x.stride()}")
        if self.sum_out.data_ptr() in (x.data_ptr(), self.residual.data_ptr()):
            raise LinearShapeError("the norm's sum output must not overwrite x or the residual it is read from")
        return [self.residual, self.sum_out, self.weight, float(self.eps), float(self.weight_offset)]


def _norm_meta(norm: NormPrologue | None, blocks: Blocks) -> dict[str, object]:
    if norm is not None and blocks.mma:
        raise LinearShapeError("a norm prologue runs on CUDA-core tiles; the tile is a tensor-core one")
    return dict(NORM=norm is not None, RESIDUAL=norm is not None and norm.residual is not None)


def _tile_meta(blocks: Blocks, k: int, x: torch.Tensor, weight: torch.Tensor) -> dict[str, object]:
    """The launch's tile arguments; an MMA tile takes operands of one dtype (16-bit, or FP32 products
    at full precision: the interpreter's, and tests')."""
    if blocks.mma and (x.dtype != weight.dtype or x.dtype not in (torch.bfloat16, torch.float16, torch.float32)):
        raise LinearShapeError(f"a tensor-core tile takes x and weights of one float dtype, got {x.dtype} "
                               f"and {weight.dtype}")
    meta: dict[str, object] = dict(EVEN_K=k % blocks.block_k == 0, BLOCK_M=blocks.block_m, BLOCK_N=blocks.block_n,
                                   BLOCK_K=blocks.block_k, MMA=blocks.mma,
                                   PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
                                   num_warps=blocks.num_warps)
    if blocks.num_stages is not None:
        meta["num_stages"] = blocks.num_stages
    return meta


def linear_launch(x: torch.Tensor, weights: Sequence[torch.Tensor], outs: Sequence[torch.Tensor], *,
                  biases: Sequence[torch.Tensor] | None = None, columns: Sequence[int] | None = None,
                  blocks: Blocks | None = None, norm: NormPrologue | None = None) -> Callable[[], None]:
    """A bound launch of outs[g][:, :columns[g]] = x @ weights[g][:columns[g]]^T (+ biases[g]), up to
    three groups in one launch: operands checked and arguments packed once, here.

    `columns` defaults to each output's width (the logits lowering passes the sampled ids only).
    `norm`: x is normalized in the launch's prologue first (`NormPrologue`).
    """
    groups = len(weights)
    if not 1 <= groups <= MAX_GROUPS:
        raise LinearShapeError(f"one launch takes 1..{MAX_GROUPS} products, got {groups}")
    columns = [int(o.shape[1]) for o in outs] if columns is None else [int(n) for n in columns]
    _check(x, weights, outs, biases, columns)
    rows, k = x.shape
    blocks = blocks or choose_blocks(rows, sum(columns), k, cuda=x.is_cuda,
                                     tensor_cores=tensor_core_operands(x, weights[0]))
    tiles = [triton.cdiv(n, blocks.block_n) for n in columns]
    packed: list[object] = [x, x.stride(0), rows, k]
    for g in range(MAX_GROUPS):
        i = g if g < groups else 0
        w = weights[i]
        b = biases[i] if biases is not None else w
        packed += [w, w.stride(0), b, outs[i], outs[i].stride(0), columns[i]]
        if g < 2:
            packed.append(tiles[i] if g < groups else 0)
    packed += norm.arguments(x) if norm is not None else [x, x, x, 0.0, 0.0]
    meta = dict(GROUPS=groups, HAS_BIAS=biases is not None, **_tile_meta(blocks, k, x, weights[0]),
                **_norm_meta(norm, blocks), **dependent(x))
    launch = _linear_kernel[(sum(tiles),)]
    return lambda: launch(*packed, **meta)


def linear(x: torch.Tensor, weights: Sequence[torch.Tensor], outs: Sequence[torch.Tensor], *,
           biases: Sequence[torch.Tensor] | None = None, columns: Sequence[int] | None = None,
           blocks: Blocks | None = None, norm: NormPrologue | None = None) -> None:
    """Run `linear_launch(...)` once."""
    linear_launch(x, weights, outs, biases=biases, columns=columns, blocks=blocks, norm=norm)()


def gated_launch(x: torch.Tensor, gate_weight: torch.Tensor, up_weight: torch.Tensor, out: torch.Tensor, *,
                 activation: str, gate_bias: torch.Tensor | None = None, up_bias: torch.Tensor | None = None,
                 blocks: Blocks | None = None, norm: NormPrologue | None = None) -> Callable[[], None]:
    """A bound launch of out = act(round(x @ Wg^T + bg)) * round(x @ Wu^T + bu), rounding to out's
    dtype; `norm`: x is normalized in the launch's prologue first (`NormPrologue`)."""
    if activation not in ACTIVATION_CODES:
        raise LinearShapeError(f"unknown activation {activation!r}; expected one of {sorted(ACTIVATION_CODES)}")
    if (gate_bias is None) != (up_bias is None):
        raise LinearShapeError("gate and up products take biases together or not at all")
    n = int(out.shape[1])
    biases = None if gate_bias is None else [gate_bias, up_bias]
    _check(x, [gate_weight, up_weight], [out, out], biases, [n, n])
    rows, k = x.shape
    blocks = blocks or choose_blocks(rows, n, k, cuda=x.is_cuda, gated=True,
                                     tensor_cores=tensor_core_operands(x, gate_weight))
    packed = (x, x.stride(0), rows, k,
              gate_weight, gate_weight.stride(0), gate_bias if gate_bias is not None else gate_weight,
              up_weight, up_weight.stride(0), up_bias if up_bias is not None else up_weight,
              out, out.stride(0), n, *(norm.arguments(x) if norm is not None else [x, x, x, 0.0, 0.0]))
    meta = dict(HAS_BIAS=gate_bias is not None, ACTIVATION=ACTIVATION_CODES[activation],
                **_tile_meta(blocks, k, x, gate_weight), **_norm_meta(norm, blocks), **dependent(x))
    launch = _gated_kernel[(triton.cdiv(n, blocks.block_n),)]
    return lambda: launch(*packed, **meta)


def gated_linear(x: torch.Tensor, gate_weight: torch.Tensor, up_weight: torch.Tensor, out: torch.Tensor, *,
                 activation: str, gate_bias: torch.Tensor | None = None, up_bias: torch.Tensor | None = None,
                 blocks: Blocks | None = None, norm: NormPrologue | None = None) -> None:
    """Run `gated_launch(...)` once."""
    gated_launch(x, gate_weight, up_weight, out, activation=activation, gate_bias=gate_bias, up_bias=up_bias,
                 blocks=blocks, norm=norm)()
