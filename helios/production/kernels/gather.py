"""Row gathers (device side): `embedding` (a table row per packed token), `last_row_gather` (each
lane's last packed row) and their counterpart `scatter` (row t of x into row index[t] of out).

One program per output row; the row is copied in blocks of `BLOCK` elements.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from helios.production.kernels.launch import dependent, wait_for_prior


@triton.jit
def _embedding_kernel(ids_ptr, table_ptr, out_ptr, vocab, width, row_offset, BLOCK: tl.constexpr,
                      PDL: tl.constexpr):
    wait_for_prior(PDL)
    row = tl.program_id(0).to(tl.int64)
    token = tl.load(ids_ptr + row).to(tl.int64) - row_offset
    valid = (token >= 0) & (token < vocab)
    safe = tl.where(valid, token, 0)
    readable = tl.where(valid, width, 0)  # the row's readable extent: none for an invalid id
    for start in range(0, width, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < width
        values = tl.load(table_ptr + safe * width + cols, mask=cols < readable, other=0.0)
        tl.store(out_ptr + row * width + cols, values, mask=mask)


def embedding(ids: torch.Tensor, table: torch.Tensor, out: torch.Tensor, *, row_offset: int = 0,
              block: int = 1024) -> None:
    """out[t] = table[ids[t] - row_offset], a zero row outside [0, V) (a rank's vocabulary slice)."""
    vocab, width = table.shape
    _embedding_kernel[(ids.shape[0],)](ids, table, out, vocab, width, row_offset,
                                       BLOCK=min(block, triton.next_power_of_2(width)), **dependent(out))


@triton.jit
def _last_row_kernel(x_ptr, lane_ptr, out_ptr, rows, width, ROWS_BLOCK: tl.constexpr, BLOCK: tl.constexpr,
                     PDL: tl.constexpr):
    wait_for_prior(PDL)
    lane = tl.program_id(0)
    last = tl.zeros((), dtype=tl.int32) - 1
    for start in range(0, rows, ROWS_BLOCK):
        t = start + tl.arange(0, ROWS_BLOCK)
        lanes = tl.load(lane_ptr + t, mask=t < rows, other=-1)
        last = tl.maximum(last, tl.max(tl.where(lanes == lane, t, -1), axis=0))
    found = last >= 0
    source = tl.where(found, last, 0).to(tl.int64)
    readable = tl.where(found, width, 0)
    for start in range(0, width, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < width
        values = tl.load(x_ptr + source * width + cols, mask=cols < readable, other=0)
        tl.store(out_ptr + lane.to(tl.int64) * width + cols, values, mask=mask)


def last_row_gather(x: torch.Tensor, token_lane: torch.Tensor, out: torch.Tensor, *, block: int = 1024,
                    rows_block: int = 1024) -> None:
    """out[l] = x[last row t with token_lane[t] == l], zeros for a lane without rows; the lanes are
    scanned `rows_block` rows at a time, the row copied `block` elements at a time."""
    rows = x.shape[0]
    width = x.numel() // rows if rows else 0
    lanes = out.shape[0]
    _last_row_kernel[(lanes,)](x, token_lane, out, rows, width,
                               ROWS_BLOCK=min(rows_block, triton.next_power_of_2(max(rows, 1))),
                               BLOCK=min(block, triton.next_power_of_2(max(width, 1))), **dependent(out))


@triton.jit
def _gather_row(x_ptr, index_ptr, out_ptr, rows, width, row, BLOCK: tl.constexpr):
    """out[row] = x[index[row]], a zero row for an index outside x's `rows`."""
    source = tl.load(index_ptr + row).to(tl.int64)
    valid = (source >= 0) & (source < rows)
    safe = tl.where(valid, source, 0)
    readable = tl.where(valid, width, 0)  # the picked row's extent: none for an index outside x
    for start in range(0, width, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        values = tl.load(x_ptr + safe * width + cols, mask=cols < readable, other=0)
        tl.store(out_ptr + row * width + cols, values, mask=cols < width)


# NOTE: a gather's or scatter's row count may count cache pages, one in the placeholder buffers the
# kernels phase runs plans over and many once the cache is sized: unspecialized (Triton would make a
# 1 a constant), the kernel compiled ahead is the one serving launches.
@triton.jit(do_not_specialize=["r0", "r1", "r2", "r3", "r4", "r5"])
def _gather_group_kernel(index_ptr, x0, o0, r0, w0, x1, o1, r1, w1, x2, o2, r2, w2, x3, o3, r3, w3,
                         x4, o4, r4, w4, x5, o5, r5, w5, GROUPS: tl.constexpr, BLOCK: tl.constexpr,
                         PDL: tl.constexpr):
    # program (row, g): row `row` of gather g; every gather of the group picks by the same index
    wait_for_prior(PDL)
    row = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1)
    if g == 0:
        _gather_row(x0, index_ptr, o0, r0, w0, row, BLOCK)
    if GROUPS > 1 and g == 1:
        _gather_row(x1, index_ptr, o1, r1, w1, row, BLOCK)
    if GROUPS > 2 and g == 2:
        _gather_row(x2, index_ptr, o2, r2, w2, row, BLOCK)
    if GROUPS > 3 and g == 3:
        _gather_row(x3, index_ptr, o3, r3, w3, row, BLOCK)
    if GROUPS > 4 and g == 4:
        _gather_row(x4, index_ptr, o4, r4, w4, row, BLOCK)
    if GROUPS > 5 and g == 5:
        _gather_row(x5, index_ptr, o5, r5, w5, row, BLOCK)


MAX_GATHERS = 6  # gathers one `gather_group` launch takes


def gather_group(xs: list[torch.Tensor], index: torch.Tensor, outs: list[torch.Tensor], *, block: int = 1024) -> None:
    """outs[g][t] = xs[g][index[t]] along the first axis for every g, a zero row where index[t] is
    outside xs[g]'s rows: one launch of one program a picked row and tensor (any dtypes and widths;
    contiguous tensors), for one gather or several by one index."""
    if not 1 <= len(xs) <= MAX_GATHERS or len(outs) != len(xs):
        raise ValueError(f"gather_group takes 1..{MAX_GATHERS} tensors and as many outputs, got {len(xs)}, "
                         f"{len(outs)}")
    packed: list[object] = []
    widths = []
    for g in range(MAX_GATHERS):
        x, out = (xs[g], outs[g]) if g < len(xs) else (xs[0], outs[0])
        rows = x.shape[0]
        width = x.numel() // rows if rows else 0
        widths.append(width)
        packed += [x, out, rows, width]
    if index.shape[0]:
        _gather_group_kernel[(index.shape[0], len(xs))](
            index, *packed, GROUPS=len(xs), BLOCK=min(block, triton.next_power_of_2(max(max(widths), 1))),
            **dependent(outs[0]))


@triton.jit(do_not_specialize=["rows"])  # NOTE: the row count may count cache pages (see above)
def _scatter_kernel(x_ptr, index_ptr, out_ptr, rows, width, BLOCK: tl.constexpr, PDL: tl.constexpr):
    wait_for_prior(PDL)
    row = tl.program_id(0).to(tl.int64)
    target = tl.load(index_ptr + row).to(tl.int64)
    valid = (target >= 0) & (target < rows)
    safe = tl.where(valid, target, 0)
    writable = tl.where(valid, width, 0)  # the row's writable extent: none for an index outside out
    for start in range(0, width, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        values = tl.load(x_ptr + row * width + cols, mask=cols < width, other=0)
        tl.store(out_ptr + safe * width + cols, values, mask=cols < writable)


def scatter(out: torch.Tensor, x: torch.Tensor, index: torch.Tensor, *, block: int = 1024) -> None:
    """out[index[t]] = x[t] along the first axis, in place; rows whose index is outside [0, R) are
    skipped (in-range indices of one call are distinct, so programs never race)."""
    rows = out.shape[0]
    width = out.numel() // rows if rows else 0
    if index.shape[0]:
        _scatter_kernel[(index.shape[0],)](x, index, out, rows, width,
                                           BLOCK=min(block, triton.next_power_of_2(max(width, 1))),
                                           **dependent(out))
