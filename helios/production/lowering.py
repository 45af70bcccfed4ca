"""Lowering (device side): a validated program becomes a `LaunchPlan` over static tensors, once, at load.

`LOWERINGS` holds one lowering per operator of the operator set (the registry test requires it);
`lower_program` walks the operators in order, binds every tensor to its static storage (weights,
manifest buffers, arena scratch), and fuses neighbours where it saves a launch without changing
meaning:

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

The rotary fusions (what may join a rotary launch, and when a head norm may run later, in its
prologue) are in `rotary_lowering.py`. Matrix products (matmul, logits, and the matmul fusions) are
lowered in `linear_lowering.py`: Triton
GEMV kernels or torch (cuBLAS on a GPU) per product shape, as the `LinearPolicy` of `tuning.py`
decides (timed on a GPU; torch on a CPU unless a test injects Triton). Every other operator is a
Triton kernel except `add`, `mul`, `copy`, `gather`, `where` and `fill`, which are small torch calls
on static tensors (`gather` and `where` move one integer per lane: a device-owned pending token). A
scratch tensor returns to the arena after its last reader, so every layer of a program reuses one set
of buffers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from helios.errors import HeliosError
from helios.production import linear_lowering, rotary_lowering
from helios.production.buffers import ScratchArena, torch_dtype
from helios.production.kernels import activation, attention, gather, norm, rotary, sampling
from helios.production.plan import Launch, LaunchPlan
from helios.production.rotary_lowering import rope_tables
from helios.production.tuning import LinearPolicy, default_policy
from helios.program.registry import OPERATORS
from helios.program.validate import ValidatedOperator
from helios.proto import program_pb2

P = program_pb2


class LoweringError(HeliosError):
    """A program cannot be lowered on this device (a tensor without storage, an unlowered operator)."""


@dataclass(slots=True)
class Context:
    """What one operator's lowering sees: the program's tensors and the device's shared resources."""

    tensors: dict[str, torch.Tensor]
    arena: ScratchArena
    device: torch.device
    where: str
    linear: LinearPolicy
    decls: Mapping[str, program_pb2.TensorDecl]

    def t(self, name: str) -> torch.Tensor:
        return self.tensors[name]

    def dtype(self, name: str) -> torch.dtype:
        bound = self.tensors.get(name)
        return bound.dtype if bound is not None else torch_dtype(self.decls[name].dtype, f"{self.where} {name}")


Lowering = Callable[[Context, ValidatedOperator], Callable[[], None]]


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.shape[-1])


def _embedding(c: Context, op: ValidatedOperator):
    ids, table, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    return lambda: gather.embedding(ids, table, out)


def _rms_norm(c: Context, op: ValidatedOperator):
    x, w, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    eps, offset = float(op.attributes["eps"]), float(op.attributes.get("weight_offset", 0.0))
    return lambda: norm.norm(x, w, out, eps=eps, weight_offset=offset)


def _layer_norm(c: Context, op: ValidatedOperator):
    x, w, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    bias = c.t(op.inputs[2]) if len(op.inputs) > 2 else None
    eps = float(op.attributes["eps"])
    return lambda: norm.norm(x, w, out, eps=eps, layer=True, bias=bias)


def _head_rms_norm(c: Context, op: ValidatedOperator):
    x, w, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    eps, head_dim = float(op.attributes["eps"]), int(op.attributes["head_dim"])
    return lambda: norm.norm(x, w, out, eps=eps, width=head_dim)


def _elementwise(fn):
    def lower(c: Context, op: ValidatedOperator):
        a, b, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
        return lambda: fn(a, b, out=out)
    return lower


def _gated_activation(c: Context, op: ValidatedOperator):
    gate, up, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    kind = str(op.attributes["activation"])
    return lambda: activation.gated_activation(gate, up, out, activation=kind)


def _rotary(c: Context, op: ValidatedOperator):
    x, positions, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    key = ("rope", tuple(sorted((k, v) for k, v in op.attributes.items())))
    inv_freq, factor = c.arena.memo(key, lambda: rope_tables(op.attributes, c.device))
    head_dim, rotary_dim = int(op.attributes["head_dim"]), int(op.attributes["rotary_dim"])
    return lambda: rotary.rotary_cache(x, positions, head_dim=head_dim, inv_freq=inv_freq, rotary_dim=rotary_dim,
                                       attention_factor=factor, out=out)


def _paged_cache_write(c: Context, op: ValidatedOperator):
    cache, values, lanes, positions, table = (c.t(n) for n in op.inputs)
    head_dim = cache.shape[3]
    return lambda: rotary.rotary_cache(values, positions, head_dim=head_dim, cache=cache, token_lane=lanes,
                                       page_table=table)


def _paged_attention(c: Context, op: ValidatedOperator):
    q, key_cache, value_cache, lanes, positions, table = (c.t(n) for n in op.inputs)
    out = c.t(op.outputs[0])
    _, page_tokens, kv_heads, head_dim = key_cache.shape
    heads = q.shape[1] // head_dim
    rows = q.shape[0]
    splits = 1
    if c.device.type == "cuda":
        splits = attention.choose_splits(rows, kv_heads, table.shape[1] * page_tokens)
    scratch = None
    if splits > 1:
        scratch = c.arena.memo(("attention", rows, heads, head_dim, splits),
                               lambda: attention.split_scratch(rows, heads, head_dim, splits, c.device))
    scale = float(op.attributes["scale"])
    window = op.attributes.get("sliding_window")
    softcap = op.attributes.get("softcap")
    tile = attention.choose_tile(rows, heads // kv_heads, cuda=c.device.type == "cuda")
    return lambda: attention.paged_attention(q, key_cache, value_cache, lanes, positions, table, out, scale=scale,
                                             sliding_window=window, softcap=softcap, splits=splits,
                                             scratch=scratch, tile=tile)


def _last_row_gather(c: Context, op: ValidatedOperator):
    x, lanes, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    return lambda: gather.last_row_gather(x, lanes, out)


def _sample(c: Context, op: ValidatedOperator):
    logits, seed, positions, parameters, histogram, mask = (c.t(n) for n in op.inputs)
    out = c.t(op.outputs[0])
    rows, vocab = logits.shape
    switch = c.arena.memo(("rank_filters",), sampling.RankFilters)
    sampler = c.arena.memo(("sampler", rows, vocab),
                           lambda: sampling.Sampler(rows, vocab, c.device, rank_filters=switch))
    draw_index = int(op.attributes.get("draw_index", 0))
    return lambda: sampler(logits, seed, positions, parameters, histogram, mask, out, draw_index=draw_index)


def _argmax(c: Context, op: ValidatedOperator):
    logits, out = c.t(op.inputs[0]), c.t(op.outputs[0])
    return lambda: sampling.argmax(logits, out)


def _copy(c: Context, op: ValidatedOperator):
    x, out = c.t(op.inputs[0]).reshape(-1), c.t(op.outputs[0]).reshape(-1)
    return lambda: out.copy_(x)


def _gather(c: Context, op: ValidatedOperator):
    x, index, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    rows = x.shape[0]
    # [N, 1, ...]: one validity flag per picked row, broadcast over the row's elements
    shape = (index.shape[0],) + (1,) * (x.dim() - 1)
    zero = torch.zeros((), dtype=x.dtype, device=x.device)

    def run() -> None:
        valid = (index >= 0) & (index < rows)
        picked = x.index_select(0, torch.where(valid, index, 0))
        torch.where(valid.reshape(shape), picked, zero, out=out)
    return run


def _where(c: Context, op: ValidatedOperator):
    cond, a, b, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.inputs[2]), c.t(op.outputs[0])
    return lambda: torch.where(cond != 0, a, b, out=out)


def _fill(c: Context, op: ValidatedOperator):
    out = c.t(op.outputs[0])
    value = float(op.attributes["value"])
    fill = value if out.is_floating_point() else int(value)
    return lambda: out.fill_(fill)


LOWERINGS: Mapping[str, Lowering] = {
    "embedding": _embedding,
    "rms_norm": _rms_norm,
    "layer_norm": _layer_norm,
    "head_rms_norm": _head_rms_norm,
    "matmul": linear_lowering.lower_matmul,
    "add": _elementwise(torch.add),
    "mul": _elementwise(torch.mul),
    "gated_activation": _gated_activation,
    "rotary": _rotary,
    "paged_cache_write": _paged_cache_write,
    "paged_attention": _paged_attention,
    "last_row_gather": _last_row_gather,
    "logits": linear_lowering.lower_logits,
    "sample": _sample,
    "argmax": _argmax,
    "copy": _copy,
    "gather": _gather,
    "where": _where,
    "fill": _fill,
}


# ------------------------------------------------------------------------------------------------ fusion

def _fused_add_norm(c: Context, add: ValidatedOperator, rms: ValidatedOperator):
    a, b, total = c.t(add.inputs[0]), c.t(add.inputs[1]), c.t(add.outputs[0])
    w, out = c.t(rms.inputs[1]), c.t(rms.outputs[0])
    eps, offset = float(rms.attributes["eps"]), float(rms.attributes.get("weight_offset", 0.0))
    return lambda: norm.norm(a, w, out, eps=eps, weight_offset=offset, residual=b, sum_out=total)


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
        return rotary_lowering.rotary_fusion(c, operators, i, deferred)
    if i + 1 >= len(operators):
        return None
    nxt = operators[i + 1]
    if op.op == "add" and nxt.op == "rms_norm" and nxt.inputs[0] == op.outputs[0] \
            and op.outputs[0] not in nxt.outputs:
        return "add+rms_norm"
    return None


def lower_program(program: program_pb2.Program, operators: Sequence[ValidatedOperator], *,
                  weights: Mapping[str, torch.Tensor], buffers: Mapping[str, torch.Tensor],
                  arena: ScratchArena, device: torch.device, fuse: bool = True,
                  linear_policy: LinearPolicy | None = None) -> LaunchPlan:
    """Lower one validated program into a launch plan over static storage (see the module docstring).

    `linear_policy` chooses Triton or torch for each small matrix product (default: measured on a
    GPU, torch on a CPU; see tuning.py); `fuse=False` lowers every operator on its own.
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
    deferred = rotary_lowering.head_norm_deferrals(operators, readers, decls) if fuse else {}
    absorbed = set(deferred.values())
    # a deferred norm reads its input where its rotary runs: its storage lives until then
    runs_at = {norm: rot for rot, norm in deferred.items()}
    last_read = {name: max(runs_at.get(r, r) for r in indices) for name, indices in readers.items()}
    context = Context(tensors, arena, device, where, linear_policy or default_policy(device), decls)
    launches: list[Launch] = []

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
        fused = _fusion(context, operators, i, readers, deferred) if fuse else None
        if fused is None and fuse:
            fused = linear_lowering.matmul_fusion(context, operators, i, readers)
        covered = None
        if fused is not None and fused.startswith(("matmul*", linear_lowering.GATED)):
            group = tuple(operators[i:i + linear_lowering.fusion_size(fused)])
            bind_outputs(group, linear_lowering.unstored(group, fused))
            run = linear_lowering.lower_fusion(context, group, fused)
        elif fused == "add+rms_norm":
            group = (op, operators[i + 1])
            bind_outputs(group, set())
            run = _fused_add_norm(context, *group)
        elif fused is not None and rotary_lowering.is_rotary_fusion(fused):
            sides, covered = rotary_lowering.rotary_group(operators, i, fused, deferred)
            group = tuple(o for side in sides for o in side.operators)
            skip = rotary_lowering.unstored(sides, covered, readers, decls)
            bind_outputs(group, skip)
            run = rotary_lowering.lower_rotary_fusion(context, sides, skip)
        else:
            group = (op,)
            bind_outputs(group, set())
            run = LOWERINGS[op.op](context, op)
        covered = covered or tuple(range(i, i + len(group)))
        launches.append(Launch(fused or op.op, covered, run))
        release(max(covered), group)
        i = max(covered) + 1
    missing = sorted(set(OPERATORS) - set(LOWERINGS))
    if missing:
        raise LoweringError(f"operators without a production lowering: {missing}")
    samples = any(launch.kernel == "sample" for launch in launches)
    switch = arena.memo(("rank_filters",), sampling.RankFilters) if samples else None
    return LaunchPlan(program.graph, tuple(launches), bound, len(operators), rank_filters=switch)
