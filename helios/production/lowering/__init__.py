"""Lowering (device side): a validated program becomes a `LaunchPlan` over static tensors, once, at load.

`LOWERINGS` holds one lowering per operator of the operator set (the registry test requires it);
`lower_program` walks the operators in order, binds every tensor to its static storage (weights,
manifest buffers, arena scratch), and fuses neighbours where it saves a launch without changing
meaning (the norm prologue within its rounding, and only where measured faster):

    add(a, b) -> s ; rms_norm(s, w) -> n               =>  one norm kernel storing s and n
    rotary(x, pos) -> r ; paged_cache_write(c, r, ...)  =>  one kernel rotating into the cache
                                                             (and into r only if r is read again)
      [; paged_cache_write(cv, v, ...) at the same slots]    (v into its plane in the same launch)
    head_rms_norm(x, w) -> n ... rotary(n, pos) -> r   =>  the norm in the rotary kernel's prologue
                                                             (n read by that rotary alone; the norm
                                                             runs where the rotary runs, so nothing in
                                                             between may write x, w or n)
    rotary(q, pos) -> qr ; rotary(k, pos) -> kr [; ...] =>  one launch of two sides (one rope, the
                                                             same positions, neither side reading
                                                             what the other writes)
    matmul(x, Wa) -> a ; matmul(x, Wb) -> b [; matmul(x, Wc) -> c]
                                                        =>  one multi-output GEMV (q/k/v)
    matmul(x, Wg) -> g ; matmul(x, Wu) -> u ; gated_activation(g, u) -> h
                                                        =>  one GEMV storing act(g) * u into h
    either group above where its products stay on torch (too many rows for the GEMVs)
                                                        =>  its products side by side, each on a
                                                             stream of its own (joined before the
                                                             next launch), where timed faster
    [add(a, b) -> s ;] rms_norm(s, w) -> n ; <a matmul, either group above, of n>
                                                        =>  the norm (and the add, s stored) in the
                                                             GEMV's one pass, n never stored (n read
                                                             by those products alone; GEMVs on
                                                             CUDA-core tiles of at most 8 rows,
                                                             the fused launch timed faster)
    gather(a, i) -> a' ; gather(b, i) -> b' [; ...]    =>  one launch picking every tensor's rows
                                                             (up to six; none reads another's output)
    copy(x) -> a ; fill() -> b [; copies, fills ...]    =>  one launch moving every tensor (up to
                                                             eight, each touching tensors no other
                                                             writes: a completion record's fields)

The modules of this package, along the seams of the walk:

    context.py    what one operator's lowering sees (`Context`) and `LoweringError`
    operators.py  `LOWERINGS`, one lowering per operator, and the add+rms_norm fusion
    rotary.py     the rope tables, rotary and cache-write lowerings, the rotary fusions (what may join
                  a rotary launch, and when a head norm may run later, in its prologue)
    linear.py     matrix products (matmul, logits, the matmul fusions): Triton GEMV kernels or torch
                  (cuBLAS on a GPU) per product shape, as the `LinearPolicy` of `product_choice.py` decides
                  (timed on a GPU; torch on a CPU unless a test injects Triton)
    speculative.py  the speculative operators' lowerings (kernels/speculative.py, their samplers memoized)

This module walks the program (`lower_program`). A scratch tensor returns to the arena after its
last reader, so every layer of a program reuses one set of buffers. `gpu_paths` (a `GpuPaths`,
helios/production/gpu_paths.py) makes every lowering take the GPU's branches at small tiles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from helios.production.buffers import ScratchArena, torch_dtype
from helios.production.gpu_paths import GpuPaths
from helios.production.lowering import linear, rotary
from helios.production.lowering.context import Context, LoweringError, rank_filters
from helios.production.lowering.operators import (
    LOWERINGS,
    gather_group_size,
    lower_add_rms_norm,
    lower_gather_group,
    lower_move_group,
    move_group_size,
)
from helios.production.lowering.product_choice import LinearPolicy, default_policy, policy_for
from helios.production.plan import Launch, LaunchPlan
from helios.program.registry import OPERATORS
from helios.program.validate import ValidatedOperator
from helios.proto import program_pb2

__all__ = ["LOWERINGS", "LoweringError", "lower_program"]

P = program_pb2


def _readers(operators: Sequence[ValidatedOperator]) -> dict[str, list[int]]:
    readers: dict[str, list[int]] = {}
    for index, op in enumerate(operators):
        for name in op.inputs:
            readers.setdefault(name, []).append(index)
    return readers


def _fusion(c: Context, operators: Sequence[ValidatedOperator], i: int, readers: Mapping[str, list[int]],
            deferred: Mapping[int, int]) -> str | None:
    op = operators[i]
    if op.op == "rotary":
        return rotary.rotary_fusion(c, operators, i, deferred)
    if i + 1 >= len(operators):
        return None
    nxt = operators[i + 1]
    if op.op == "add" and nxt.op == "rms_norm" and nxt.inputs[0] == op.outputs[0] \
            and op.outputs[0] not in nxt.outputs:
        return "add+rms_norm"
    gathers = gather_group_size(operators, i)
    if gathers >= 2:
        return f"gather*{gathers}"
    moves = move_group_size(operators, i)
    return f"copy+fill*{moves}" if moves >= 2 else None


def lower_program(program: program_pb2.Program, operators: Sequence[ValidatedOperator], *,
                  weights: Mapping[str, torch.Tensor], buffers: Mapping[str, torch.Tensor],
                  arena: ScratchArena, device: torch.device, fuse: bool = True,
                  linear_policy: LinearPolicy | None = None, gpu_paths: GpuPaths | None = None,
                  group=None, lanes: int | None = None, lane_rows: int | None = None) -> LaunchPlan:
    """Lower one validated program into a launch plan over static storage (see the module docstring).

    `linear_policy` chooses Triton or torch for each small matrix product (default: measured on a
    GPU, torch on a CPU, Triton with `gpu_paths`; see product_choice.py); `fuse=False` lowers every
    operator on its own; `gpu_paths` forces the GPU's branches at small tiles (gpu_paths.py); `group`
    is the rank's `RankGroup` the collectives of a multi-rank core call (production/ranks/); `lanes` is
    the graph's batch capacity where known (a graph of one lane skips attention's per-row kernel);
    `lane_rows` the most rows one request holds in a round where known (contract `Graph.lane_rows`:
    attention runs tiled over query rows only where a request's rows can fill a tile).
    """
    where = f"program {program.graph!r}"
    decls = {d.name: d for d in program.tensors}
    tensors: dict[str, torch.Tensor] = {}
    for name, decl in decls.items():
        if decl.role == P.TENSOR_ROLE_WEIGHT:
            if decl.resource not in weights:
                raise LoweringError(f"{where}: tensor {name!r} needs weight {decl.resource!r}, which is not loaded")
            tensors[name] = weights[decl.resource]
        elif decl.role != P.TENSOR_ROLE_SCRATCH:
            if decl.buffer not in buffers:
                raise LoweringError(f"{where}: tensor {name!r} needs buffer {decl.buffer!r}, which has no storage")
            storage = buffers[decl.buffer]
            declared = [int(e) for e in decl.shape]
            if list(storage.shape[1:]) != declared[1:] or (declared[0] and storage.shape[0] != declared[0]):
                raise LoweringError(f"{where}: buffer {decl.buffer!r} is {list(storage.shape)}, "
                                    f"tensor {name!r} declares {declared}")
            tensors[name] = storage
    bound = dict(tensors)
    arena.reset()
    readers = _readers(operators)
    deferred = rotary.head_norm_deferrals(operators, readers, decls) if fuse else {}
    absorbed = set(deferred.values())
    # a deferred norm reads its input where its rotary runs: its storage lives until then
    runs_at = {norm: rot for rot, norm in deferred.items()}
    last_read = {name: max(runs_at.get(r, r) for r in indices) for name, indices in readers.items()}
    policy = linear_policy or (default_policy(device) if gpu_paths is None
                               else policy_for("auto", device, gpu_paths=True))
    context = Context(tensors, arena, device, where, policy, decls, gpu_paths, group, lanes, lane_rows)
    launches: list[Launch] = []
    # inspection: each scratch tensor's storage -> the last name bound to it (`LaunchPlan.scratch`)
    owners: dict[int, str] = {}
    intact: dict[str, torch.Tensor] = {}

    def bind_outputs(ops: Sequence[ValidatedOperator], skip: set[str]) -> None:
        for op in ops:
            for name in op.outputs:
                decl = decls[name]
                if name in tensors or name in skip:
                    continue
                if decl.role != P.TENSOR_ROLE_SCRATCH:
                    raise LoweringError(f"{where}: output {name!r} has no storage")
                tensors[name] = arena.acquire(torch_dtype(decl.dtype, f"{where} tensor {name}"),
                                              tuple(int(e) for e in decl.shape))
                intact.pop(owners.get(id(tensors[name]), ""), None)  # its storage now holds `name`
                owners[id(tensors[name])] = name
                intact[name] = tensors[name]

    def release(upto: int, ops: Sequence[ValidatedOperator]) -> None:
        for op in ops:
            for name in (*op.inputs, *op.outputs):
                if decls[name].role == P.TENSOR_ROLE_SCRATCH and name in tensors \
                        and last_read.get(name, -1) <= upto:
                    arena.release(tensors.pop(name))

    i = 0
    while i < len(operators):
        op = operators[i]
        if op.op not in LOWERINGS:
            raise LoweringError(f"{where} operators[{i}]: operator {op.op!r} has no production lowering")
        if i in absorbed:  # a head norm that runs in the prologue of a later rotary launch
            i += 1
            continue
        fused = linear.norm_product_fusion(context, operators, i, readers) if fuse else None
        if fused is None and fuse:
            fused = _fusion(context, operators, i, readers, deferred)
        if fused is None and fuse:
            fused = linear.matmul_fusion(context, operators, i, readers)
        if fused is None and fuse:
            fused = linear.stream_fusion(context, operators, i, readers)
        covered = None
        if fused is not None and fused.startswith(linear.NORM_PREFIXES):
            group = tuple(operators[i:i + linear.norm_fusion_size(fused)])
            bind_outputs(group, linear.norm_unstored(group, fused))
            run = linear.lower_norm_fusion(context, group, fused)
        elif fused is not None and fused.startswith(("matmul*", linear.GATED)):
            group = tuple(operators[i:i + linear.fusion_size(fused)])
            bind_outputs(group, linear.unstored(group, fused))
            run = linear.lower_fusion(context, group, fused)
        elif fused is not None and fused.startswith(linear.STREAMS):
            group = tuple(operators[i:i + linear.fusion_size(fused)])
            bind_outputs(group, set())
            run = linear.lower_stream_fusion(context, group, fused)
        elif fused == "add+rms_norm":
            group = (op, operators[i + 1])
            bind_outputs(group, set())
            run = lower_add_rms_norm(context, *group)
        elif fused is not None and fused.startswith(("gather*", "copy+fill*")):  # N operators run at once
            group = tuple(operators[i:i + int(fused.rsplit("*", 1)[1])])
            bind_outputs(group, set())
            run = (lower_gather_group if fused.startswith("gather*") else lower_move_group)(context, group)
        elif fused is not None and rotary.is_rotary_fusion(fused):
            sides, covered = rotary.rotary_group(operators, i, fused, deferred)
            group = tuple(o for side in sides for o in side.operators)
            skip = rotary.unstored(sides, covered, readers, decls)
            bind_outputs(group, skip)
            run = rotary.lower_rotary_fusion(context, sides, skip)
        else:
            group = (op,)
            bind_outputs(group, set())
            run = LOWERINGS[op.op](context, op)
        covered = covered or tuple(range(i, i + len(group)))
        launches.append(Launch(fused or op.op, covered, run, tuple(n for o in group for n in o.inputs)))
        release(max(covered), group)
        i = max(covered) + 1
    missing = sorted(set(OPERATORS) - set(LOWERINGS))
    if missing:
        raise LoweringError(f"operators without a production lowering: {missing}")
    samples = any(launch.kernel in ("sample", "token_probability", "speculative_verify") for launch in launches)
    switch = rank_filters(arena) if samples else None
    return LaunchPlan(program.graph, tuple(launches), bound, len(operators), rank_filters=switch, scratch=intact)
