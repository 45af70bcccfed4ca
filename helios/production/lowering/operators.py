"""One lowering per operator of the set (device side): `LOWERINGS`, operator name -> `Lowering`.

Each lowering binds the operator's tensors from the context once and returns the launch that runs
it: a Triton kernel of `kernels/`, or for `add`, `mul`, `copy`, `gather`, `where`, `column_write` and
`fill` a small torch call on static tensors (`gather` and `where` move one integer per lane: a
device-owned pending token). Matrix products (`matmul`, `logits`) are lowered in `linear.py`, `rotary`
and `paged_cache_write` in `rotary.py`, the speculative operators in `speculative.py`, the collectives in `collectives.py`,
`prompt_scores` (torch reductions and a sort) in `scores.py`, `page_snapshot` and `page_restore` in
`snapshots.py`, `short_convolution` and `state_row_copy` in `recurrent.py`, `activation` and `bidirectional_attention` in `vision.py`,
`latent_attention` and `head_matmul` in `latent.py`, `engram_gather` in `engram.py`. `lower_add_rms_norm` is the one fusion of neighbours lowered
here: the norm of a sum, in one kernel that stores the sum too. `paged_attention` picks its kernel by
the graph's row capacity (`attention.choose_query_tile`): tiled over query rows for graphs of many
rows (prefill and MIXED chunks), one program per row and context split for decode-sized graphs.

Tiles are the device's, except in the GPU-paths mode (`Context.gpu_paths`, helios/production/gpu_paths.py):
norms take `rows_per_program` rows a program, attention splits the context (`attention_splits`, the
combine pass included) in `attention_keys`-key steps, the sampler and argmax scan `vocab_block` ids a
program, the gathers and the activation copy `copy_block` elements a program iteration.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch

from helios.production.kernels import activation, attention, copies, gather, norm, sampling
from helios.production.lowering.collectives import lower_all_gather, lower_all_reduce
from helios.production.lowering.context import Context, Lowering, in_order, rank_filters, sampler_storage
from helios.production.lowering.engram import lower_engram_gather
from helios.production.lowering.latent import lower_head_matmul, lower_latent_attention
from helios.production.lowering.linear import lower_logits, lower_matmul
from helios.production.lowering.recurrent import lower_short_convolution, lower_state_row_copy
from helios.production.lowering.rotary import lower_paged_cache_write, lower_rotary
from helios.production.lowering.scores import lower_prompt_scores
from helios.production.lowering.snapshots import lower_page_restore, lower_page_snapshot
from helios.production.lowering.speculative import (
    lower_copied_proposal,
    lower_speculative_allocate,
    lower_speculative_commit,
    lower_speculative_grammar_mask,
    lower_speculative_pack,
    lower_speculative_verify,
    lower_token_probability,
)
from helios.production.lowering.vision import lower_activation, lower_bidirectional_attention
from helios.program.validate import ValidatedOperator


def _rows_tile(c: Context) -> dict:
    """The norm kernel's rows-a-program keyword: the GPU-paths mode's, else none (the device's)."""
    return {} if c.gpu_paths is None else {"rows_per_program": c.gpu_paths.rows_per_program}


def _copy_block(c: Context) -> dict:
    """The block keyword of the gathers and the activation: the GPU-paths mode's, else none (default)."""
    return {} if c.gpu_paths is None else {"block": c.gpu_paths.copy_block}


def _embedding(c: Context, op: ValidatedOperator):
    ids, table, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    block = _copy_block(c)
    offset = int(op.attributes.get("row_offset", 0))
    return lambda: gather.embedding(ids, table, out, row_offset=offset, **block)


def _rms_norm(c: Context, op: ValidatedOperator):
    x, w, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    eps, offset = float(op.attributes["eps"]), float(op.attributes.get("weight_offset", 0.0))
    tile = _rows_tile(c)
    return lambda: norm.norm(x, w, out, eps=eps, weight_offset=offset, **tile)


def _layer_norm(c: Context, op: ValidatedOperator):
    x, w, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    bias = c.t(op.inputs[2]) if len(op.inputs) > 2 else None
    eps = float(op.attributes["eps"])
    tile = _rows_tile(c)
    return lambda: norm.norm(x, w, out, eps=eps, layer=True, bias=bias, **tile)


def _head_rms_norm(c: Context, op: ValidatedOperator):
    x, w, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    eps, head_dim = float(op.attributes["eps"]), int(op.attributes["head_dim"])
    tile = _rows_tile(c)
    return lambda: norm.norm(x, w, out, eps=eps, width=head_dim, **tile)


def _elementwise(fn):
    def lower(c: Context, op: ValidatedOperator):
        a, b, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
        return lambda: fn(a, b, out=out)
    return lower


def _gated_activation(c: Context, op: ValidatedOperator):
    gate, up, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    kind = str(op.attributes["activation"])
    block = _copy_block(c)
    return lambda: activation.gated_activation(gate, up, out, activation=kind, **block)


def _paged_attention(c: Context, op: ValidatedOperator):
    q, key_cache, value_cache, lanes, positions, table = (c.t(n) for n in op.inputs)
    out = c.t(op.outputs[0])
    _, page_tokens, kv_heads, head_dim = key_cache.shape
    heads = q.shape[1] // head_dim
    rows = q.shape[0]
    splits = 1
    paths = c.gpu_paths
    cuda = c.device.type == "cuda"
    # by the graph's row capacity: many rows run tiled over query rows, decode-sized graphs per row
    # (attention.choose_query_tile); the GPU-paths mode keeps the per-row splits it forces
    query_tile = None if paths is not None else attention.choose_query_tile(rows, heads // kv_heads, cuda=cuda,
                                                                            lane_rows=c.lane_rows)
    if paths is not None:  # the split and combine at every context length
        splits = paths.attention_splits
    elif cuda and query_tile is None:
        splits = attention.choose_splits(rows, kv_heads, table.shape[1] * page_tokens)
    scratch = None
    if splits > 1:
        scratch = c.arena.memo(("attention", rows, heads, head_dim, splits),
                               lambda: attention.split_scratch(rows, heads, head_dim, splits, c.device))
    scale = float(op.attributes["scale"])
    window = op.attributes.get("sliding_window")
    softcap = op.attributes.get("softcap")
    tile = attention.choose_tile(rows, heads // kv_heads, cuda=cuda)
    if paths is not None:
        tile = attention.AttentionTile(block_n=paths.attention_keys, num_warps=tile.num_warps)
    # a graph of one request (PREFILL) has no tile of several lanes: its rows are the tiled kernel's alone
    one_lane = c.lanes == 1
    return lambda: attention.paged_attention(q, key_cache, value_cache, lanes, positions, table, out, scale=scale,
                                             sliding_window=window, softcap=softcap, splits=splits,
                                             scratch=scratch, tile=tile, query_tile=query_tile, one_lane=one_lane)


def _last_row_gather(c: Context, op: ValidatedOperator):
    x, lanes, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    blocks = {} if c.gpu_paths is None else {"block": c.gpu_paths.copy_block, "rows_block": c.gpu_paths.copy_block}
    return lambda: gather.last_row_gather(x, lanes, out, **blocks)


def _sample(c: Context, op: ValidatedOperator):
    logits, seed, positions, parameters, histogram, mask = (c.t(n) for n in op.inputs)
    out = c.t(op.outputs[0])
    rows, vocab = logits.shape
    switch = rank_filters(c.arena)
    block = 4096 if c.gpu_paths is None else c.gpu_paths.vocab_block
    storage = sampler_storage(c.arena)
    sampler = c.arena.memo(("sampler", rows, vocab, block),
                           lambda: sampling.Sampler(rows, vocab, c.device, block=block, rank_filters=switch,
                                                    storage=storage))
    draw_index = int(op.attributes.get("draw_index", 0))
    return lambda: sampler(logits, seed, positions, parameters, histogram, mask, out, draw_index=draw_index)


def _argmax(c: Context, op: ValidatedOperator):
    logits, out = c.t(op.inputs[0]), c.t(op.outputs[0])
    block = {} if c.gpu_paths is None else {"block": c.gpu_paths.vocab_block}
    return lambda: sampling.argmax(logits, out, **block)


def _copy(c: Context, op: ValidatedOperator):
    x, out = c.t(op.inputs[0]).reshape(-1), c.t(op.outputs[0]).reshape(-1)
    return lambda: out.copy_(x)


def _gather(c: Context, op: ValidatedOperator):
    return lower_gather_group(c, (op,))


def _torch_gather(c: Context, op: ValidatedOperator):
    """One gather's torch form (five small calls)."""
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


def _independent_run(operators: Sequence[ValidatedOperator], i: int, limit: int,
                     joins: Callable[[ValidatedOperator], bool]) -> int:
    """How many consecutive operators from operators[i] `join` a group whose members can run at once:
    none reads or overwrites what an earlier member writes, none overwrites what an earlier member
    (or itself) reads; at most `limit`."""
    read: set[str] = set()
    written: set[str] = set()
    n = 0
    while n < limit and i + n < len(operators):
        op = operators[i + n]
        if not joins(op):
            break
        out = op.outputs[0]
        if any(x in written for x in op.inputs) or out in written or out in read or out in op.inputs:
            break
        read.update(op.inputs)
        written.add(out)
        n += 1
    return n


def gather_group_size(operators: Sequence[ValidatedOperator], i: int) -> int:
    """How many consecutive gathers from operators[i] pick by the same index, none reading or
    overwriting what another reads or writes (at most `gather.MAX_GATHERS`): one launch takes them all,
    its gathers running at once (0 or 1: no group)."""
    if operators[i].op != "gather":
        return 0
    index = operators[i].inputs[1]
    return _independent_run(operators, i, gather.MAX_GATHERS, lambda op: op.op == "gather" and op.inputs[1] == index)


def lower_gather_group(c: Context, ops: Sequence[ValidatedOperator]):
    """Gathers by one index (one, or a group of `gather_group_size`): one launch on a GPU
    (`gather.gather_group`; the torch form is five a gather), each gather's torch form on a CPU, where
    each program of the interpreted kernel would cost milliseconds, and in order where a gather
    writes storage another of the group reads or writes (two names viewing one buffer)."""
    if (c.device.type == "cuda" or c.gpu_paths is not None) and not _writes_overlap(c, ops):
        xs, outs = [c.t(op.inputs[0]) for op in ops], [c.t(op.outputs[0]) for op in ops]
        index, block = c.t(ops[0].inputs[1]), _copy_block(c)
        return lambda: gather.gather_group(xs, index, outs, **block)
    return in_order([_torch_gather(c, op) for op in ops])


MOVES = ("copy", "fill")


def move_group_size(operators: Sequence[ValidatedOperator], i: int) -> int:
    """How many consecutive copies and fills from operators[i] touch distinct tensors (none reads or
    overwrites what another of them writes, none overwrites what another reads; at most
    `copies.MAX_ITEMS`): one launch does them all (0 or 1: no group)."""
    return _independent_run(operators, i, copies.MAX_ITEMS, lambda op: op.op in MOVES)


def lower_move_group(c: Context, ops: Sequence[ValidatedOperator]):
    """Copies and fills of `move_group_size`: one launch on a GPU (and in the GPU-paths mode), each
    operator's torch call on a CPU (or where a tensor is not contiguous)."""
    touched = [c.t(name) for op in ops for name in (*op.inputs, *op.outputs)]
    if (c.device.type == "cuda" or c.gpu_paths is not None) and all(t.is_contiguous() for t in touched) \
            and not _writes_overlap(c, ops):
        moves = [copies.Move(c.t(op.outputs[0]).view(-1), src=c.t(op.inputs[0]).view(-1)) if op.op == "copy"
                 else copies.Move(c.t(op.outputs[0]).view(-1), value=float(op.attributes["value"])) for op in ops]
        return copies.copy_fill_group(moves, **_copy_block(c))
    return in_order([LOWERINGS[op.op](c, op) for op in ops])


def _writes_overlap(c: Context, ops: Sequence[ValidatedOperator]) -> bool:
    """Whether a tensor one of `ops` writes shares storage with another tensor of the group (names
    differ, storage may not: two names can view one buffer); such a group runs its torch calls in order."""
    def span(t: torch.Tensor) -> tuple[int, int]:
        return t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
    spans = [(i, span(c.t(name))) for i, op in enumerate(ops) for name in op.inputs]
    writes = [(i, span(c.t(op.outputs[0]))) for i, op in enumerate(ops)]
    return any(i != j and a[0] < b[1] and b[0] < a[1] for i, a in writes for j, b in (*spans, *writes))


def _where(c: Context, op: ValidatedOperator):
    cond, a, b, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.inputs[2]), c.t(op.outputs[0])
    return lambda: torch.where(cond != 0, a, b, out=out)


def _scatter(c: Context, op: ValidatedOperator):
    out, x, index = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.inputs[2])
    block = _copy_block(c)
    return lambda: gather.scatter(out, x, index, **block)


def _column_write(c: Context, op: ValidatedOperator):
    out, value = c.t(op.inputs[0]), c.t(op.inputs[1])
    column = out.select(1, int(op.attributes["index"]))  # a strided view of out's column
    return lambda: column.copy_(value)


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
    "matmul": lower_matmul,
    "add": _elementwise(torch.add),
    "mul": _elementwise(torch.mul),
    "gated_activation": _gated_activation,
    "rotary": lower_rotary,
    "paged_cache_write": lower_paged_cache_write,
    "paged_attention": _paged_attention,
    "last_row_gather": _last_row_gather,
    "logits": lower_logits,
    "sample": _sample,
    "argmax": _argmax,
    "copy": _copy,
    "gather": _gather,
    "where": _where,
    "scatter": _scatter,
    "column_write": _column_write,
    "token_probability": lower_token_probability,
    "speculative_allocate": lower_speculative_allocate,
    "speculative_pack": lower_speculative_pack,
    "speculative_verify": lower_speculative_verify,
    "speculative_commit": lower_speculative_commit,
    "copied_proposal": lower_copied_proposal,
    "speculative_grammar_mask": lower_speculative_grammar_mask,
    "all_reduce": lower_all_reduce,
    "all_gather": lower_all_gather,
    "prompt_scores": lower_prompt_scores,
    "page_snapshot": lower_page_snapshot,
    "page_restore": lower_page_restore,
    "short_convolution": lower_short_convolution,
    "state_row_copy": lower_state_row_copy,
    "activation": lower_activation,
    "bidirectional_attention": lower_bidirectional_attention,
    "head_matmul": lower_head_matmul,
    "latent_attention": lower_latent_attention,
    "engram_gather": lower_engram_gather,
    "fill": _fill,
}


def lower_add_rms_norm(c: Context, add: ValidatedOperator, rms: ValidatedOperator):
    """add(a, b) -> s ; rms_norm(s, w) -> n as one norm kernel storing s and n."""
    a, b, total = c.t(add.inputs[0]), c.t(add.inputs[1]), c.t(add.outputs[0])
    w, out = c.t(rms.inputs[1]), c.t(rms.outputs[0])
    eps, offset = float(rms.attributes["eps"]), float(rms.attributes.get("weight_offset", 0.0))
    tile = _rows_tile(c)
    return lambda: norm.norm(a, w, out, eps=eps, weight_offset=offset, residual=b, sum_out=total, **tile)
