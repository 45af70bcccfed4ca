"""The collectives' lowerings (device side): `all_reduce` and `all_gather` (docs/operators.md).

A program of a one-rank core may carry collectives over one rank (each returns its input): they
lower to a copy into the output's static storage. Collectives over more ranks need the production
ranks (one worker per rank joined through `torch.distributed`), which this runtime does not build
yet: `NativeModel.load` refuses a core of more than one rank before any program is lowered, and a
program reaching lowering with such a collective fails with `LoweringError` naming it.
"""

from __future__ import annotations

from helios.production.lowering.context import Context, LoweringError
from helios.program.validate import ValidatedOperator


def _one_rank(c: Context, op: ValidatedOperator):
    ranks = int(op.attributes["ranks"])
    if ranks != 1:
        raise LoweringError(f"{op.op} over {ranks} ranks: tensor-parallel ranks are not built in the "
                            "production runtime")
    x, out = c.t(op.inputs[0]), c.t(op.outputs[0])
    if x.data_ptr() == out.data_ptr():
        return lambda: None
    return lambda: out.copy_(x)


lower_all_reduce = _one_rank
lower_all_gather = _one_rank
