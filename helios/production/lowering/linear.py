"""Matrix products in the lowering (device side): `matmul` and `logits`, and the matmul fusions.

Each product of at most 16 rows asks the context's `LinearPolicy` (product_choice.py) for its path, per
product shape: the Triton kernels of `kernels/linear.py` or torch (cuBLAS on a GPU); larger products
always run on torch; the Triton tile is the device's (`kernels/linear.py` `choose_blocks`), or in the
GPU-paths mode (`Context.gpu_paths`) `small_blocks`. Fusions (taken only where the policy picks
Triton for the fused shape):

    matmul(x, Wa) -> a ; matmul(x, Wb) -> b [; matmul(x, Wc) -> c]
                                            =>  one multi-output launch (q/k/v); outputs scratch
    matmul(x, Wg) -> g ; matmul(x, Wu) -> u ; gated_activation(g, u) -> h
                                            =>  one launch storing act(g) * u into h; g and u are
                                                scratch read by the activation only, never stored

    [add(a, b) -> s ;] rms_norm(s, w) -> n ; <a matmul or either group above, reading n>
                                            =>  the same launch with the norm (and the add) in its
                                                one pass (`kernels/linear.py` NormPrologue): s
                                                stored by the launch, n never stored; taken where n
                                                is read by those products alone and the product runs
                                                on a CUDA-core tile of at most NORM_PROLOGUE_MAX_ROWS
                                                rows (a batch-1 decode step's two norms a layer), and
                                                the policy times the fused launch faster than the
                                                norm kernel then the product launch

The first two keep the program's meaning: each group adds its own bias, and the gated kernel rounds
g and u to their dtype before the activation, as the unfused matmuls store them. The norm prologue
rounds s where the unfused add stores it, but not the normalized rows n (the row's RMS divides the
product instead): it agrees with the unfused pair within n's rounding to its dtype, which is why a
measured choice, not a rule, takes it. The logits product runs in
FP32 (no rounding of 16-bit operands); on Triton it covers the sampled ids only, since the tail is
filled with -inf after the product and the softcap anyway.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from helios.production.kernels import activation, linear
from helios.production.kernels import norm as norm_kernel
from helios.production.lowering.context import Context, in_order
from helios.production.lowering.product_choice import STREAMS, ProductShape
from helios.program.validate import ValidatedOperator
from helios.proto import program_pb2

P = program_pb2
GATED = "gate_up+activation"


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.shape[-1])


def _torch_matmul(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, bias: torch.Tensor | None):
    x, out, wt = _flat(x), _flat(out), w.t()
    if bias is not None:
        return lambda: torch.addmm(bias, x, wt, out=out)
    return lambda: torch.mm(x, wt, out=out)


def _triton_matmuls(xs: torch.Tensor, ws: Sequence[torch.Tensor], outs: Sequence[torch.Tensor],
                    biases: Sequence[torch.Tensor] | None, blocks: linear.Blocks | None = None):
    return linear.linear_launch(_flat(xs), ws, [_flat(o) for o in outs], biases=biases, blocks=blocks)


def _blocks(c: Context, rows: int, columns: Sequence[int], k: int) -> linear.Blocks | None:
    """The Triton tile the lowering imposes: the GPU-paths mode's small tile, else None (the device's,
    or rows the kernels do not take: a group on streams)."""
    return None if c.gpu_paths is None or rows > linear.MAX_ROWS else linear.small_blocks(rows, columns, k)


def _dtypes(c: Context, x: str, w: str, out: str) -> str:
    """"x dtype x weight dtype -> output dtype", e.g. "bfloat16xbfloat16->bfloat16"."""
    def name(tensor: str) -> str:
        return str(c.dtype(tensor)).removeprefix("torch.")
    return f"{name(x)}x{name(w)}->{name(out)}"


def _input(c: Context, op: ValidatedOperator, x: torch.Tensor | None) -> torch.Tensor:
    """The rows a product multiplies: its input, or `x` standing for it (a norm prologue's input, of
    the same shape and dtype as the normalized rows, which are never stored)."""
    return _flat(c.t(op.inputs[0]) if x is None else x)


def _product_shape(c: Context, ops: Sequence[ValidatedOperator], fusion: str,
                   x_rows: torch.Tensor | None = None) -> ProductShape:
    """The product shape of `ops` (matmuls of one input) as `fusion`."""
    x = ops[0].inputs[0]
    rows = int(_input(c, ops[0], x_rows).shape[0])
    columns = tuple(int(c.t(op.inputs[1]).shape[0]) for op in ops)
    k = int(c.t(ops[0].inputs[1]).shape[1])
    return ProductShape(rows, columns, k, _dtypes(c, x, ops[0].inputs[1], ops[0].outputs[0]), fusion,
                        bias=len(ops[0].inputs) > 2)


def _matmul_shape(c: Context, ops: Sequence[ValidatedOperator], fusion: str,
                  x_rows: torch.Tensor | None = None) -> ProductShape | None:
    """The product shape of `ops` (matmuls of one input), or None where the Triton kernels cannot take it."""
    rows = _input(c, ops[0], x_rows).shape[0]
    return _product_shape(c, ops, fusion, x_rows) if 1 <= rows <= linear.MAX_ROWS else None


def _single_on_triton(c: Context, op: ValidatedOperator, x_rows: torch.Tensor | None = None) -> ProductShape | None:
    """One matmul's shape where the policy runs it on Triton, else None (torch, or a shape the
    kernels cannot take)."""
    shape = _matmul_shape(c, (op,), "matmul", x_rows)
    if shape is None:
        return None
    x, w = _input(c, op, x_rows), c.t(op.inputs[1])
    bias = c.t(op.inputs[2]) if len(op.inputs) > 2 else None
    out_shape, out_dtype = tuple(int(e) for e in c.decls[op.outputs[0]].shape), c.dtype(op.outputs[0])
    blocks = _blocks(c, shape.rows, shape.columns, shape.k)

    def candidates():
        o = torch.empty(out_shape, dtype=out_dtype, device=c.device)
        return (_triton_matmuls(x, [w], [o], None if bias is None else [bias], blocks),
                _torch_matmul(x, w, o, bias))
    return shape if c.linear.choose(shape, candidates) == "triton" else None


def lower_matmul(c: Context, op: ValidatedOperator):
    x, w, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    bias = c.t(op.inputs[2]) if len(op.inputs) > 2 else None
    shape = _single_on_triton(c, op)
    if shape is not None:
        return _triton_matmuls(x, [w], [out], None if bias is None else [bias],
                               _blocks(c, shape.rows, shape.columns, shape.k))
    return _torch_matmul(x, w, out, bias)


def lower_logits(c: Context, op: ValidatedOperator):
    h, w, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    sampled = op.attributes.get("sampled_tokens")
    softcap = op.attributes.get("softcap")
    tail = out[:, int(sampled):] if sampled is not None and int(sampled) < out.shape[1] else None
    product = _logits_product(c, op, h, w, out, sampled, softcap, tail is not None)

    def run() -> None:
        product()
        if softcap is not None:
            out.div_(float(softcap)).tanh_().mul_(float(softcap))
        if tail is not None:
            tail.fill_(float("-inf"))
    return run


def _logits_product(c: Context, op: ValidatedOperator, h: torch.Tensor, w: torch.Tensor, out: torch.Tensor,
                    sampled, softcap, has_tail: bool):
    """The FP32 product of the logits: Triton over the sampled ids only where the policy picks it
    (the tail is filled with -inf after the product anyway), else torch over every id."""
    rows, vocab = out.shape
    if 1 <= rows <= linear.MAX_ROWS and h.dim() == 2 and h.shape[0] == rows:
        columns = int(sampled) if has_tail else vocab
        shape = ProductShape(rows, (columns,), int(h.shape[1]), _dtypes(c, op.inputs[0], op.inputs[1],
                                                                          op.outputs[0]), "logits")
        blocks = _blocks(c, rows, (columns,), int(h.shape[1]))

        def triton_product(o: torch.Tensor):
            return linear.linear_launch(h, [w], [o], columns=[columns], blocks=blocks)

        def candidates():
            o = torch.empty_like(out)
            return triton_product(o), _torch_logits(c, h, w, o)
        if c.linear.choose(shape, candidates) == "triton":
            return triton_product(out)
    return _torch_logits(c, h, w, out)


def _torch_logits(c: Context, h: torch.Tensor, w: torch.Tensor, out: torch.Tensor):
    wt = w.t()
    if h.dtype == torch.float32 and w.dtype == torch.float32:
        def product() -> None:
            torch.mm(h, wt, out=out)
    elif c.device.type == "cuda" and _mixed_mm(c.device):
        def product() -> None:
            # NOTE: cuBLAS reads bf16/f16 operands and accumulates and stores FP32: no rounding to bf16.
            torch.mm(h, wt, out_dtype=torch.float32, out=out)
    else:
        def product() -> None:
            torch.mm(h.float(), wt.float(), out=out)
    return product


_MIXED_MM: dict[str, bool] = {}


def _mixed_mm(device: torch.device) -> bool:
    """Whether this torch multiplies 16-bit operands into an FP32 output in one call (probed once)."""
    if str(device) not in _MIXED_MM:
        try:
            a = torch.ones((2, 16), dtype=torch.bfloat16, device=device)
            out = torch.empty((2, 2), dtype=torch.float32, device=device)
            torch.mm(a, a[:2].t(), out_dtype=torch.float32, out=out)
            _MIXED_MM[str(device)] = bool(out[0, 0].item() == 16.0)
        except (TypeError, RuntimeError, NotImplementedError):
            _MIXED_MM[str(device)] = False
    return _MIXED_MM[str(device)]


@dataclass(frozen=True, slots=True)
class _Group:
    """The operands of a matmul fusion, resolved while its inputs are bound (the timing candidates
    of a deferred policy are built after lowering, when scratch inputs are no longer in the context)."""

    x: torch.Tensor  # [rows, K]
    weights: tuple[torch.Tensor, ...]
    biases: tuple[torch.Tensor, ...] | None
    outputs: tuple[tuple[tuple[int, ...], torch.dtype], ...]  # shape and dtype of each product
    activation: str | None  # gated fusion: the activation of act(gate) * up; weights are (gate, up)
    device: torch.device
    blocks: linear.Blocks | None = None  # the Triton tile the lowering imposes (GPU-paths mode), else None

    def __post_init__(self) -> None:
        if not 1 <= len(self.weights) <= linear.MAX_GROUPS or len(self.outputs) != len(self.weights) \
                or (self.biases is not None and len(self.biases) != len(self.weights)) \
                or (self.activation is not None and len(self.weights) != 2):
            raise ValueError(f"malformed matmul group: {len(self.weights)} weights, {len(self.outputs)} outputs")


def _group(c: Context, ops: Sequence[ValidatedOperator], fusion: str, x_rows: torch.Tensor | None = None) -> _Group:
    return _group_of(c, _input(c, ops[0], x_rows), ops, fusion)


def _group_of(c: Context, x: torch.Tensor, ops: Sequence[ValidatedOperator], fusion: str) -> _Group:
    """The group's operands over input rows `x` (its product input, or a norm prologue's input)."""
    products = _gate_up(ops) if fusion == GATED else tuple(ops)
    biases = tuple(c.t(op.inputs[2]) for op in products) if len(products[0].inputs) > 2 else None
    outputs = tuple((tuple(int(e) for e in c.decls[op.outputs[0]].shape), c.dtype(op.outputs[0])) for op in products)
    weights = tuple(c.t(op.inputs[1]) for op in products)
    columns = [int(w.shape[0]) for w in weights]
    return _Group(x, weights, biases, outputs, str(ops[2].attributes["activation"]) if fusion == GATED else None,
                  c.device, _blocks(c, int(x.shape[0]), columns[:1] if fusion == GATED else columns,
                                    int(x.shape[1])))


def _group_outputs(c: Context, ops: Sequence[ValidatedOperator], fusion: str) -> list[torch.Tensor]:
    """What a fused group's launch writes: the activation output of the gated group, else each
    matmul's output."""
    return [c.t(ops[2].outputs[0])] if fusion == GATED else [c.t(op.outputs[0]) for op in ops]


def _gate_up(ops: Sequence[ValidatedOperator]) -> tuple[ValidatedOperator, ValidatedOperator]:
    """(gate matmul, up matmul) of a gate/up/activation group, as the activation reads them."""
    first, second, act = ops
    return (first, second) if act.inputs[0] == first.outputs[0] else (second, first)


def _fusion_candidates(group: _Group):
    """(Triton fused run, torch unfused run) over fresh outputs, for timing a fusion."""
    def empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device=group.device)

    outs = [empty(*spec) for spec in group.outputs]
    biases = group.biases if group.biases is not None else (None,) * len(group.weights)
    unfused = [_torch_matmul(group.x, w, o, b) for w, o, b in zip(group.weights, outs, biases, strict=True)]
    if group.activation is not None:
        gate, up = outs
        h = empty(*group.outputs[0])
        kind = group.activation
        unfused.append(lambda: activation.gated_activation(gate, up, h, activation=kind))
        fused = _product_launch(group, group.x, [h])
    else:
        fused = _product_launch(group, group.x, outs)

    def torch_run() -> None:
        for run in unfused:
            run()
    return fused, torch_run


def _matmul_group(operators: Sequence[ValidatedOperator], i: int, decls: Mapping[str, program_pb2.TensorDecl],
                  readers: Mapping[str, list[int]]) -> str | None:
    """A matmul fusion starting at operators[i], structurally (the policy still decides whether to take it)."""
    op = operators[i]
    if op.op != "matmul":
        return None
    x, bias = op.inputs[0], len(op.inputs) > 2

    def joins(other: ValidatedOperator, taken: Sequence[ValidatedOperator]) -> bool:
        names = {x, *(t.outputs[0] for t in taken)}
        return (other.op == "matmul" and other.inputs[0] == x and (len(other.inputs) > 2) == bias
                and other.outputs[0] not in names and decls[other.outputs[0]].role == P.TENSOR_ROLE_SCRATCH
                and decls[other.inputs[1]].dtype == decls[op.inputs[1]].dtype
                and decls[other.outputs[0]].dtype == decls[op.outputs[0]].dtype)

    group = [op]
    # outputs are scratch: the arena never hands out storage of a live tensor, so no output aliases x
    if op.outputs[0] == x or decls[op.outputs[0]].role != P.TENSOR_ROLE_SCRATCH:
        return None
    while len(group) < linear.MAX_GROUPS and i + len(group) < len(operators) \
            and joins(operators[i + len(group)], group):
        group.append(operators[i + len(group)])
    if len(group) >= 2 and i + 2 < len(operators):
        act = operators[i + 2]
        products = {group[0].outputs[0], group[1].outputs[0]}
        if act.op == "gated_activation" and set(act.inputs) == products and len(act.inputs) == 2 \
                and act.outputs[0] not in (*products, x) \
                and all(decls[n].role == P.TENSOR_ROLE_SCRATCH and readers.get(n) == [i + 2] for n in products) \
                and decls[act.outputs[0]].dtype == decls[op.outputs[0]].dtype:
            return GATED
    return f"matmul*{len(group)}" if len(group) >= 2 else None


def fusion_size(fusion: str) -> int:
    """Operators a matmul fusion covers: 3 for gate/up/activation, n for "matmul*n" (either on
    streams too)."""
    fusion = fusion.removeprefix(STREAMS)
    return 3 if fusion == GATED else int(fusion.rsplit("*", 1)[1])


def matmul_fusion(c: Context, operators: Sequence[ValidatedOperator], i: int,
                  readers: Mapping[str, list[int]], x_rows: torch.Tensor | None = None) -> str | None:
    """The matmul fusion to take at operators[i]: structurally possible and Triton by the policy, or
    None (`x_rows`: rows standing for the products' input, see `_input`)."""
    fused = _matmul_group(operators, i, c.decls, readers)
    if fused is None:
        return None
    ops = operators[i:i + fusion_size(fused)]
    shape = _matmul_shape(c, ops[:2] if fused == GATED else ops, fused, x_rows)
    if shape is None:
        return None
    group = _group(c, ops, fused, x_rows)
    return fused if c.linear.choose(shape, lambda: _fusion_candidates(group)) == "triton" else None


def unstored(ops: Sequence[ValidatedOperator], fusion: str) -> set[str]:
    """Outputs of a fused group that get no storage (gate and up of the gated fusion)."""
    return {ops[0].outputs[0], ops[1].outputs[0]} if fusion == GATED else set()


def lower_fusion(c: Context, ops: Sequence[ValidatedOperator], fusion: str):
    """The launch of a fused group whose outputs (but `unstored`) are bound: consecutive matmuls of
    one input as one multi-output launch, or gate, up and the activation as one launch into the
    activation output."""
    kind = GATED if fusion == GATED else "matmul*"
    group = _group(c, ops, kind)
    return _product_launch(group, group.x, _group_outputs(c, ops, kind))


# ------------------------------------------------------------------------- the norm prologue

NORM_PROLOGUE_MAX_ROWS = 8  # rows a norm-prologue product takes (it runs on CUDA-core tiles only)
NORM_PREFIXES = ("add+rms_norm+", "rms_norm+")


def norm_product_fusion(c: Context, operators: Sequence[ValidatedOperator], i: int,
                        readers: Mapping[str, list[int]]) -> str | None:
    """`[add(a, b) -> s ;] rms_norm(s, w) -> n ; <products of n>` as one launch, where the products
    are a matmul, a "matmul*k" group or the gated group, on Triton by the policy, on a CUDA-core
    tile, and the policy times the fused launch faster than the norm kernel followed by the same
    product launch; n is scratch read by those products alone and a, b, s, n share one shape and
    dtype. The name is the prefix and the product fusion ("add+rms_norm+matmul*3"), or None."""
    op = operators[i]
    if op.op == "add" and i + 1 < len(operators):
        add, norm, start, prefix = op, operators[i + 1], i + 2, NORM_PREFIXES[0]
        if norm.op != "rms_norm" or norm.inputs[0] != op.outputs[0] or op.outputs[0] in (*norm.outputs, *op.inputs):
            return None
        stored = [*op.inputs, op.outputs[0]]
    elif op.op == "rms_norm":
        add, norm, start, prefix = None, op, i + 1, NORM_PREFIXES[1]
        stored = [op.inputs[0]]
    else:
        return None
    n = norm.outputs[0]
    if start >= len(operators) or operators[start].op != "matmul" or operators[start].inputs[0] != n \
            or c.decls[n].role != P.TENSOR_ROLE_SCRATCH \
            or len({c.decls[name].dtype for name in (*stored, n)}) != 1 \
            or any(list(c.decls[name].shape) != list(c.decls[n].shape) for name in stored):
        return None
    operands = _norm_operands(c, add, norm)
    x = operands.x  # the products' rows stand-in while choosing: n's shape and dtype, never stored
    product = matmul_fusion(c, operators, start, readers, x)
    if product is None:
        if _matmul_group(operators, start, c.decls, readers) is not None \
                or _single_on_triton(c, operators[start], x) is None:
            return None  # a group the policy keeps on torch, or one matmul on torch
        product = "matmul"
    ops = operators[start:start + (1 if product == "matmul" else fusion_size(product))]
    if sorted(readers.get(n, [])) != [start + j for j, o in enumerate(ops) if o.op == "matmul"]:
        return None
    group = _group_of(c, x, ops, GATED if product == GATED else "matmul*")
    rows, k = int(x.shape[0]), int(x.shape[1])
    columns = [int(w.shape[0]) for w in group.weights]
    blocks = group.blocks or linear.choose_blocks(rows, columns[0] if product == GATED else sum(columns), k,
                                                  cuda=x.is_cuda, gated=product == GATED,
                                                  tensor_cores=linear.tensor_core_operands(x, group.weights[0]))
    if blocks.mma or rows > NORM_PROLOGUE_MAX_ROWS:
        return None
    shape = _matmul_shape(c, ops[:2] if product == GATED else ops, prefix + product, x)
    if shape is None or c.linear.choose(shape, lambda: _norm_candidates(group, operands)) != "triton":
        return None
    return prefix + product


@dataclass(frozen=True, slots=True)
class _NormOperands:
    """What a norm prologue reads: the rows (the add's first input, or the norm's input), the add's
    residual, the norm's weight and attributes."""

    x: torch.Tensor  # [rows, K]
    residual: torch.Tensor | None  # [rows, K]
    weight: torch.Tensor
    eps: float
    offset: float

    def prologue(self, sum_out: torch.Tensor | None) -> linear.NormPrologue:
        return linear.NormPrologue(self.weight, self.eps, self.offset, residual=self.residual,
                                   sum_out=sum_out if self.residual is not None else None)


def _norm_operands(c: Context, add: ValidatedOperator | None, norm: ValidatedOperator) -> _NormOperands:
    return _NormOperands(_flat(c.t(add.inputs[0] if add is not None else norm.inputs[0])),
                         _flat(c.t(add.inputs[1])) if add is not None else None, c.t(norm.inputs[1]),
                         float(norm.attributes["eps"]), float(norm.attributes.get("weight_offset", 0.0)))


def _product_launch(group: _Group, x: torch.Tensor, outs: Sequence[torch.Tensor],
                    norm: linear.NormPrologue | None = None):
    """The group's Triton launch over rows `x` into `outs` (the gated group: the activation output)."""
    outs = [_flat(o) for o in outs]
    if group.activation is not None:
        gate_bias, up_bias = group.biases if group.biases is not None else (None, None)
        return linear.gated_launch(x, *group.weights, outs[0], activation=group.activation, gate_bias=gate_bias,
                                   up_bias=up_bias, blocks=group.blocks, norm=norm)
    return linear.linear_launch(x, group.weights, outs, biases=group.biases, blocks=group.blocks, norm=norm)


def _norm_candidates(group: _Group, operands: _NormOperands):
    """(the fused launch, the norm kernel then the product's own launch) over fresh outputs, for
    timing a norm prologue: "triton" in its decision is the fused launch, "torch" the pair."""
    def empty(like: torch.Tensor | tuple) -> torch.Tensor:
        shape, dtype = (tuple(like.shape), like.dtype) if isinstance(like, torch.Tensor) else like
        return torch.empty(shape, dtype=dtype, device=group.device)

    outs = [empty(spec) for spec in (group.outputs[:1] if group.activation is not None else group.outputs)]
    total, normed = empty(operands.x), empty(operands.x)
    fused = _product_launch(group, operands.x, outs, operands.prologue(total))
    product = _product_launch(group, normed, outs)
    residual = operands.residual

    def unfused() -> None:
        norm_kernel.norm(operands.x, operands.weight, normed, eps=operands.eps, weight_offset=operands.offset,
                         residual=residual, sum_out=total if residual is not None else None)
        product()
    return fused, unfused


def _norm_parts(fusion: str) -> tuple[int, str]:
    """(operators before the products: 2 with the add, 1 for the norm alone; the product fusion) of
    a norm-prologue fusion's name."""
    first = 2 if fusion.startswith(NORM_PREFIXES[0]) else 1
    return first, fusion.split("+", first)[first]


def norm_fusion_size(fusion: str) -> int:
    """Operators a norm-prologue fusion covers."""
    first, product = _norm_parts(fusion)
    return first + (1 if product == "matmul" else fusion_size(product))


def norm_unstored(ops: Sequence[ValidatedOperator], fusion: str) -> set[str]:
    """Outputs of a norm-prologue group that get no storage: the normalized rows (and gate and up)."""
    first, product = _norm_parts(fusion)
    return {ops[first - 1].outputs[0], *unstored(ops[first:], product)}


def lower_norm_fusion(c: Context, ops: Sequence[ValidatedOperator], fusion: str):
    """The launch of a norm-prologue group whose outputs (but `norm_unstored`) are bound."""
    first, product = _norm_parts(fusion)
    products, kind = ops[first:], GATED if product == GATED else "matmul*"
    operands = _norm_operands(c, ops[0] if first == 2 else None, ops[first - 1])
    return _product_launch(_group_of(c, operands.x, products, kind), operands.x, _group_outputs(c, products, kind),
                           operands.prologue(_flat(c.t(ops[0].outputs[0])) if first == 2 else None))


# ------------------------------------------------------------------------- groups on side streams


def stream_fusion(c: Context, operators: Sequence[ValidatedOperator], i: int,
                  readers: Mapping[str, list[int]]) -> str | None:
    """A group of torch products at operators[i] (matmuls of one input, or gate and up with their
    activation: `_matmul_group`'s groups) of more rows than the Triton kernels take, whose products
    run side by side, each on a stream of its own, where the policy times that faster than running
    them one after another: "streams:matmul*3" (q, k and v of a decode step at 64 lanes, each product
    leaving SMs idle: 9.2 against 15.2 us on an H100), or None. The activation of the gated group runs after both products. (Groups
    the kernels take are `matmul_fusion`'s: a deferred policy answers for them provisionally in the
    warm lowering, so a streams shape first asked for in the final lowering would go untimed.)"""
    fused = _matmul_group(operators, i, c.decls, readers)
    if fused is None:
        return None
    ops = operators[i:i + fusion_size(fused)]
    if _input(c, ops[0], None).shape[0] <= linear.MAX_ROWS:
        return None
    shape = _product_shape(c, ops[:2] if fused == GATED else ops, STREAMS + fused)
    group = _group(c, ops, fused)
    return STREAMS + fused if c.linear.choose(shape, lambda: _stream_candidates(group)) == "triton" else None


def lower_stream_fusion(c: Context, ops: Sequence[ValidatedOperator], fusion: str):
    """The launch of a group on side streams whose outputs are all bound (gate and up included)."""
    kind = fusion.removeprefix(STREAMS)
    group = _group(c, ops, kind)
    products = _gate_up(ops) if kind == GATED else ops
    outs = [c.t(op.outputs[0]) for op in products]
    return _stream_runs(group, outs, c.t(ops[2].outputs[0]) if kind == GATED else None)[0]


def _stream_runs(group: _Group, outs: Sequence[torch.Tensor], activated: torch.Tensor | None):
    """(the group's products side by side then its activation, the same one after another) into
    `outs` (and `activated`, the gated group's activation output)."""
    biases = group.biases if group.biases is not None else (None,) * len(group.weights)
    runs = [_torch_matmul(group.x, w, o, b) for w, o, b in zip(group.weights, outs, biases, strict=True)]
    after = []
    if group.activation is not None:
        gate, up = outs
        kind = group.activation
        after.append(lambda: activation.gated_activation(gate, up, activated, activation=kind))
    return in_order([side_by_side(runs, group.device), *after]), in_order([*runs, *after])


def _stream_candidates(group: _Group):
    """(side by side, one after another) over fresh outputs, for timing a group on streams."""
    outs = [torch.empty(shape, dtype=dtype, device=group.device) for shape, dtype in group.outputs]
    gate_shape, dtype = group.outputs[0]
    activated = torch.empty(gate_shape, dtype=dtype, device=group.device) if group.activation is not None else None
    return _stream_runs(group, outs, activated)


_SIDE = threading.local()  # this thread's side streams by device


def _side_streams(device: torch.device, count: int, current: torch.cuda.Stream) -> list[torch.cuda.Stream]:
    """`count` side streams of `device` for the calling thread, none of them `current`. A stream joins
    a capture by waiting on the capturing stream and can belong to one capture at a time, so threads
    never share one; within a thread plans run (and are captured) one at a time. The first run of a
    plan in the thread (the kernels phase or the capture's warm-up, before any capture) makes them,
    and cuBLAS its workspace for each, outside a capture. torch hands out its streams from a pool in
    turn, so a stream made later (a capture's) can be one of these: one more than `count` is kept,
    and the one that is `current` is skipped."""
    streams = _SIDE.__dict__.setdefault("streams", {}).setdefault(str(device), [])
    while len(streams) <= count:
        streams.append(torch.cuda.Stream(device))
    return [stream for stream in streams if stream != current][:count]


def side_by_side(runs: Sequence[Callable[[], None]], device: torch.device) -> Callable[[], None]:
    """One launch running `runs` concurrently: the first on the current stream, each other on a side
    stream forked from it and joined back before the launch returns, so what follows on the current
    stream (and a CUDA graph capturing it) sees every result. On a device without streams (CPU) the
    runs go one after another."""
    if device.type != "cuda" or len(runs) == 1:
        return in_order(runs)
    first, rest = runs[0], runs[1:]

    def run() -> None:
        main = torch.cuda.current_stream(device)
        sides = _side_streams(device, len(rest), main)
        for stream, each in zip(sides, rest, strict=True):
            stream.wait_stream(main)
            with torch.cuda.stream(stream):
                each()
        first()
        for stream in sides:
            main.wait_stream(stream)
    return run
