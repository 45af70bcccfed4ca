"""The Engram operator's lowering (device side): `engram_gather` on static tensors.

The staging frames [F, S, W] are read as F * S table rows and the row index [P, O] as P * O ids, so
the gather of the row index's leading P rows is the Triton row gather of `kernels/gather.py` (`embedding`: one program per output row,
a zero row for an id outside the staging) into the output viewed as [P * O, W], which is [P, O * W]
in row-major order. No host value: the launch captures in a CUDA graph.
"""

from __future__ import annotations

from helios.production.kernels import gather
from helios.production.lowering.context import Context
from helios.program.validate import ValidatedOperator


def lower_engram_gather(c: Context, op: ValidatedOperator):
    staging, row_index, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    frames, rows, width = staging.shape
    table = staging.view(frames * rows, width)
    ids = row_index[: int(op.attributes["packed_tokens"])].reshape(-1)  # the leading P rows: a view
    rows_out = out.view(-1, width)
    block = {} if c.gpu_paths is None else {"block": c.gpu_paths.copy_block}
    return lambda: gather.embedding(ids, table, rows_out, **block)
