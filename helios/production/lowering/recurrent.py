"""The recurrent-state operators' lowerings (device side): `short_convolution` and `state_row_copy`
on static tensors.

`short_convolution` gathers, for every packed row, its window of K inputs (from the lane's rows of
this round or from its state row, zero before position 0) with a few torch calls over [P, K, C],
reduces it against the [C, K] filters in f32, and writes each lane's last K-1 inputs back into its
state row with the Triton row scatter of `kernels/gather.py` (index -1 for a slot outside the round).
Each lane's first and last rows come from `scatter_reduce` over the packed rows: no host value, so
the launch captures in a CUDA graph. `state_row_copy` is one `index_select` and the same scatter.
"""

from __future__ import annotations

import torch

from helios.production.kernels import gather
from helios.production.lowering.context import Context
from helios.program.validate import ValidatedOperator


def _block(c: Context) -> dict:
    return {} if c.gpu_paths is None else {"block": c.gpu_paths.copy_block}


def lower_short_convolution(c: Context, op: ValidatedOperator):
    state, x, weight, token_lane, positions, state_rows = (c.t(n) for n in op.inputs[:6])
    bias = c.t(op.inputs[6]) if len(op.inputs) > 6 else None
    out = c.t(op.outputs[1])
    block = _block(c)
    packed, channels = x.shape
    taps = weight.shape[2]
    rows_total, slots = state.shape[0], state_rows.shape[0]
    device = x.device
    rows = torch.arange(packed, device=device)
    tap = torch.arange(taps, device=device)
    filters = weight[:, 0, :].t().float()  # [K, C]

    def run() -> None:
        lane = token_lane.long()
        valid = (lane >= 0) & (lane < slots)
        bucket = torch.where(valid, lane, slots)  # padding rows: one extra bucket
        first = torch.full((slots + 1,), packed, dtype=torch.long, device=device).scatter_reduce(
            0, bucket, rows, "amin")
        last = torch.full((slots + 1,), -1, dtype=torch.long, device=device).scatter_reduce(0, bucket, rows, "amax")
        first_row = first[bucket].clamp(max=packed - 1)
        k = rows - first_row  # the row's index within its lane
        start = positions.long()[first_row]
        row = state_rows.long()[lane.clamp(0, slots - 1)]
        row_ok = valid & (row >= 0) & (row < rows_total)
        offset = k[:, None] - (taps - 1) + tap[None, :]  # [P, K]: window input i is the lane's input at offset
        from_x = offset >= 0
        x_window = x[(first_row[:, None] + offset).clamp(0, packed - 1)].float()
        s_window = state[row.clamp(0, rows_total - 1)[:, None], (k[:, None] + tap[None, :]).clamp(max=taps - 2)]
        s_ok = row_ok[:, None] & (start[:, None] + offset >= 0)
        zero = torch.zeros((), dtype=torch.float32, device=device)
        window = torch.where(from_x[..., None], x_window,
                             torch.where(s_ok[..., None], s_window.float(), zero))  # [P, K, C]
        y = (window * filters[None]).sum(dim=1)
        if bias is not None:
            y = y + bias.float()
        out.copy_(torch.where(valid[:, None], y, zero).to(out.dtype))
        ends = last[:slots]
        keep = window[ends.clamp(min=0), 1:].to(state.dtype).contiguous()  # [S, K-1, C]
        rows_of = state_rows.long()
        destination = torch.where((ends >= 0) & (rows_of >= 0) & (rows_of < rows_total), rows_of, -1)
        gather.scatter(state, keep, destination.to(torch.int32), **block)
    return run


def lower_state_row_copy(c: Context, op: ValidatedOperator):
    state, source, destination = (c.t(n) for n in op.inputs)
    block = _block(c)
    rows_total = state.shape[0]

    def run() -> None:
        ok = (source >= 0) & (source < rows_total) & (destination >= 0) & (destination < rows_total)
        payload = state.index_select(0, torch.where(ok, source, 0).long())
        gather.scatter(state, payload, torch.where(ok, destination, -1).to(torch.int32), **block)
    return run
