"""The collectives' lowerings (device side): `all_reduce` and `all_gather` (docs/operators.md).

Over one rank each returns its input: a copy into the output's static storage. Over N ranks the
program runs on one of N production ranks (helios/production/ranks/) and the lowering calls the
rank's data process group (`Context.group`: gloo on a CPU, run eagerly; NCCL on a GPU, where the
calls are enqueued on the current stream and so are captured into the graph's CUDA graph like any
kernel). Both gather every rank's input into static storage allocated here, once:

- `all_reduce`: the ranks' inputs are gathered and summed in FP32 in rank order on every rank, then
  rounded once to x's dtype: the operator's exact definition (a ring reduction would add in another
  order on each rank), at N times the bytes of a reduction, which is small for the decode rows it
  carries.
- `all_gather`: the ranks' inputs side by side along the last axis, rank 0 first.

A collective whose `ranks` is not the group's size, or one over several ranks without a group, fails
lowering with `LoweringError` naming it.
"""

from __future__ import annotations

import torch

from helios.production.lowering.context import Context, LoweringError
from helios.program.validate import ValidatedOperator


def _parts(c: Context, op: ValidatedOperator):
    ranks = int(op.attributes["ranks"])
    x, out = c.t(op.inputs[0]), c.t(op.outputs[0])
    if ranks == 1:
        return ranks, x, out, None
    group = c.group
    if group is None or group.size != ranks:
        held = "no ranks" if group is None else f"{group.size} ranks"
        raise LoweringError(f"{c.where}: {op.op} over {ranks} ranks, but this runtime holds {held}")
    if not x.is_contiguous():
        raise LoweringError(f"{c.where}: {op.op} input {op.inputs[0]!r} is not contiguous")
    parts = [torch.empty(x.shape, dtype=x.dtype, device=x.device) for _ in range(ranks)]
    return ranks, x, out, (group.data, parts)


def _copy(x: torch.Tensor, out: torch.Tensor):
    if x.data_ptr() == out.data_ptr():
        return lambda: None
    return lambda: out.copy_(x)


def lower_all_reduce(c: Context, op: ValidatedOperator):
    ranks, x, out, peers = _parts(c, op)
    if peers is None:
        return _copy(x, out)
    process_group, parts = peers
    total = torch.empty(x.shape, dtype=torch.float32, device=x.device)

    def run() -> None:
        process_group.allgather([parts], [x]).wait()
        total.copy_(parts[0])
        for part in parts[1:]:
            total.add_(part)
        out.copy_(total)
    return run


def lower_all_gather(c: Context, op: ValidatedOperator):
    ranks, x, out, peers = _parts(c, op)
    if peers is None:
        return _copy(x, out)
    process_group, parts = peers

    def run() -> None:
        process_group.allgather([parts], [x]).wait()
        torch.cat(parts, dim=-1, out=out)
    return run
