"""The snapshot operators' lowerings (device side): `page_snapshot` and `page_restore` on static tensors.

Each lane's page (`page_table[lane_slot, endpoint // T]`) and its validity are computed with a few
torch calls on [B] integers; the payload moves with one `index_select` and the Triton row scatter of
`kernels/gather.py`, whose index is -1 for a lane that copies nothing (the scatter skips it). Rows
and pages of one round are distinct (each lane restores into its own private page, each snapshot
into its own row), so the scatter never races.
"""

from __future__ import annotations

import torch

from helios.production.kernels import gather
from helios.production.lowering.context import Context
from helios.program.validate import ValidatedOperator


def _lanes(cache: torch.Tensor, continuation: torch.Tensor, page_table: torch.Tensor, lane_slot: torch.Tensor,
           endpoint: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(valid, page, row) per lane, page and row 0 where the lane copies nothing (the reference's
    `continuation_pages`)."""
    page_tokens = cache.shape[1]
    slots, entries = page_table.shape
    logical = torch.div(endpoint, page_tokens, rounding_mode="floor")
    valid = ((rows >= 0) & (rows < continuation.shape[0]) & (lane_slot >= 0) & (lane_slot < slots)
             & (endpoint >= 0) & (logical < entries))
    page = page_table[torch.where(valid, lane_slot, 0).long(), torch.where(valid, logical, 0).long()]
    valid = valid & (page >= 0) & (page < cache.shape[0])
    return valid, torch.where(valid, page, 0), torch.where(valid, rows, 0)


def _block(c: Context) -> dict:
    return {} if c.gpu_paths is None else {"block": c.gpu_paths.copy_block}


def lower_page_snapshot(c: Context, op: ValidatedOperator):
    continuation, cache, page_table, lane_slot, endpoint, rows = (c.t(n) for n in op.inputs)
    block = _block(c)

    def run() -> None:
        valid, page, row = _lanes(cache, continuation, page_table, lane_slot, endpoint, rows)
        payload = cache.index_select(0, page.long())
        gather.scatter(continuation, payload, torch.where(valid, row, -1), **block)
    return run


def lower_page_restore(c: Context, op: ValidatedOperator):
    cache, continuation, page_table, lane_slot, endpoint, rows = (c.t(n) for n in op.inputs)
    block = _block(c)

    def run() -> None:
        valid, page, row = _lanes(cache, continuation, page_table, lane_slot, endpoint, rows)
        payload = continuation.index_select(0, row.long())
        gather.scatter(cache, payload, torch.where(valid, page, -1), **block)
    return run
