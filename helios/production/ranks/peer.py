"""A peer rank (device side): rank r of N, driven by rank 0's round plans.

    serve_peer(core, master="10.0.0.1:29500", rank=1, size=2, device="cuda:0")

The peer opens its own copy of the core, joins rank 0 (group.py: same world size, same served
model), loads its rank with the load parameters rank 0 published (the same load-time selection,
the same pages: `NativeModel.load` with its rank and group), and then runs rank 0's commands until
it is told to stop or a collective fails:

- `submit(plan)`: its own `NativeExecutor.submit`: the round on its own buffers and program;
- `collect(sequence)`: its own `collect`, its own validation of the rows (the engine's
  `validate_round` over the plan's lanes, and `check` when given), then the agreement exchange
  (agreement.py);
- `read(names)`: its buffers `names` to rank 0 (conformance's per-rank state audit);
- `noop`: rank 0's heartbeat while idle; `stop`: return.

A peer that loses rank 0 (a collective raises) fails with `RankFailed`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch

from helios.core.source import CoreSource
from helios.production.ranks.agreement import ACCEPTED, REJECTED, UNREADABLE, agree, digest
from helios.production.ranks.executor import COLLECT, NOOP, READ, STOP, SUBMIT, first_line
from helios.production.ranks.group import RankFailed, join
from helios.runtime.completion import validate_round


def serve_peer(core: CoreSource, *, master: str, rank: int, size: int, device: str = "cpu",
               timeout: float = 30.0, startup_timeout: float = 300.0,
               check: Callable | None = None) -> None:
    """Join rank 0 at `master` as `rank` of `size` and execute its commands (module docstring)."""
    from helios.contract import StartupOptions
    from helios.production.native_model import LoadOptions, NativeModel

    where = torch.device(device)
    group = join(master=master, rank=rank, size=size, served_id=core.contract.served_id, device=where,
                 timeout=timeout, startup_timeout=startup_timeout)
    p = group.parameters
    startup = StartupOptions(max_concurrency=p.get("max_concurrency"), speculative_width=p.get("speculative_width") or 1,
                             history_drafting=bool(p.get("history_drafting")))
    fraction = {} if p.get("gpu_memory_fraction") is None else {"gpu_memory_fraction": p["gpu_memory_fraction"]}
    model = NativeModel.load(core, LoadOptions(device=device, pages=p.get("pages"), startup=startup,
                                               measure_costs=bool(p.get("measure_costs")), rank=rank, group=group,
                                               host_cache_gib=p.get("host_cache_gib"),
                                               **fraction))
    group.every(model.weight_bytes)  # rank 0 reports every rank's weights (load_rank_zero)
    contract = model.contract
    executor = model.executor
    submitted: dict[int, object] = {}
    while True:
        try:
            command = group.broadcast_object()
        except RuntimeError as error:
            raise RankFailed(f"rank {rank}: lost rank 0: {first_line(error)}") from None
        kind = command[0]
        if kind == NOOP:
            continue
        if kind == STOP:
            return
        if kind == READ:
            try:
                group.gather_objects({name: executor.buffers[name].cpu().numpy() for name in command[1]})
            except RuntimeError as error:
                raise RankFailed(f"rank {rank}: lost rank 0: {first_line(error)}") from None
            continue
        if kind == SUBMIT:
            plan = command[1]
            try:
                executor.submit(plan)
            except RuntimeError as error:
                raise RankFailed(f"rank {rank}: round {plan.sequence} failed: {first_line(error)}") from None
            except Exception as error:  # the same refusal rank 0 meets: that round never runs
                print(f"rank {rank}: round {plan.sequence} refused: {first_line(error)}", file=sys.stderr)
                continue
            submitted[plan.sequence] = plan
        elif kind == COLLECT:
            plan = submitted.pop(command[1], None)
            verdict, rows_digest = UNREADABLE, 0
            if plan is not None:
                try:
                    rows = executor.collect(plan)
                    rows_digest = digest(rows)
                    verdict = _validate(plan, rows, contract, check, rank)
                except Exception as error:
                    print(f"rank {rank}: round {plan.sequence} unreadable: {first_line(error)}", file=sys.stderr)
            try:
                agree(group, command[1], verdict, rows_digest, where)
            except RuntimeError as error:
                raise RankFailed(f"rank {rank}: lost rank 0: {first_line(error)}") from None


def _validate(plan, rows, contract, check, rank: int) -> int:
    try:
        validate_round(plan.graph, plan.lanes, rows, sequence=plan.sequence,
                       sampled_tokens=contract.vocabulary.sampled_tokens, page_tokens=contract.cache.page_tokens,
                       frame=plan.frame)
        if check is not None:
            check(plan, rows)
    except Exception as error:
        print(f"rank {rank}: rejected round {plan.sequence}: {first_line(error)}", file=sys.stderr)
        return REJECTED
    return ACCEPTED
