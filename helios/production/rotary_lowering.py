"""Rotary in the lowering (device side): the rope tables, and the fusions around a `rotary` operator.

A layer's attention prologue in the recipes' order is

    head_rms_norm(q) -> qn ; head_rms_norm(k) -> kn ; rotary(qn) -> qr ; rotary(kn) -> kr ;
    paged_cache_write(key_cache, kr, ...) ; paged_cache_write(value_cache, v, ...)

(the head norms only where the model has them: Qwen3). Each rotary becomes one launch of
`kernels/rotary.py` that also covers

  - the head norm that feeds it (`head_norm_deferrals`): taken when the norm's output is scratch
    read by that rotary alone, both split rows into the same heads, and nothing between the two
    writes the norm's input, weight or output, so running the norm where the rotary runs changes
    nothing; the kernel rounds the normalized rows to their dtype, as the unfused norm stores them;
  - the cache write of its rotated rows right after it, and then the cache write of another tensor
    (v) at the same slots (same token_lane, positions and page table) into another plane of the
    same shape (`cache_writes`).

The fusions key on operator patterns and readers only, never on a model: a Qwen3 layer's prologue is
2 launches (q; k with v) instead of 6 operators, a Llama or Mistral layer's 2 (q; k with v) instead of 4.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch

from helios.production.kernels import rotary
from helios.program.validate import ValidatedOperator
from helios.proto import program_pb2
from helios.reference.operators import rope_frequencies

if TYPE_CHECKING:
    from helios.production.lowering import Context

P = program_pb2
WRITE_SUFFIXES = ("", "+paged_cache_write", "+paged_cache_write*2")


def rope_tables(attributes: Mapping[str, object], device: torch.device) -> tuple[torch.Tensor, float]:
    """(inv_freq [rotary_dim / 2] f32 on `device`, attention factor), computed as the reference does."""
    scaling = {k: v for k, v in attributes.items() if k not in ("theta", "head_dim", "rotary_dim")}
    inv_freq, factor = rope_frequencies(theta=float(attributes["theta"]), rotary_dim=int(attributes["rotary_dim"]),
                                        **scaling)  # type: ignore[arg-type]
    return torch.from_numpy(inv_freq.copy()).to(device), float(factor)


def lower_fused_rotary(c: Context, norm: ValidatedOperator | None, rot: ValidatedOperator,
                       writes: Sequence[ValidatedOperator], keep_rotated: bool):
    """One rotary launch: the head norm in its prologue (`norm`), the k cache write and the v cache
    write (`writes`) after it; the rotated rows are stored only if `keep_rotated`."""
    x, positions = c.t((norm or rot).inputs[0]), c.t(rot.inputs[1])
    out = c.t(rot.outputs[0]) if keep_rotated else None
    key = ("rope", tuple(sorted((k, v) for k, v in rot.attributes.items())))
    inv_freq, factor = c.arena.memo(key, lambda: rope_tables(rot.attributes, c.device))
    head_dim, rotary_dim = int(rot.attributes["head_dim"]), int(rot.attributes["rotary_dim"])
    extra: dict[str, object] = {}
    if norm is not None:
        extra.update(norm_weight=c.t(norm.inputs[1]), eps=float(norm.attributes["eps"]),
                     weight_offset=float(norm.attributes.get("weight_offset", 0.0)))
    if writes:
        extra.update(cache=c.t(writes[0].inputs[0]), token_lane=c.t(writes[0].inputs[2]),
                     page_table=c.t(writes[0].inputs[4]))
    if len(writes) > 1:
        extra.update(values=c.t(writes[1].inputs[1]), value_cache=c.t(writes[1].inputs[0]))
    return lambda: rotary.rotary_cache(x, positions, head_dim=head_dim, inv_freq=inv_freq, rotary_dim=rotary_dim,
                                       attention_factor=factor, out=out, **extra)  # type: ignore[arg-type]


def head_norm_deferrals(operators: Sequence[ValidatedOperator], readers: Mapping[str, list[int]],
                         decls: Mapping[str, program_pb2.TensorDecl]) -> dict[int, int]:
    """{rotary index: index of the head_rms_norm that runs in its prologue}.

    A norm is deferred into a later rotary when its output is scratch read by that rotary alone (as
    the rotated rows), both split rows into the same heads, and no operator in between writes the
    norm's input, weight or output: then running it at the rotary's place changes nothing.
    """
    deferred: dict[int, int] = {}
    for i, op in enumerate(operators):
        if op.op != "head_rms_norm" or decls[op.outputs[0]].role != P.TENSOR_ROLE_SCRATCH:
            continue
        users = readers.get(op.outputs[0], [])
        if len(users) != 1 or users[0] <= i:
            continue
        j = users[0]
        rot = operators[j]
        if rot.op != "rotary" or rot.inputs[0] != op.outputs[0] or rot.outputs[0] in op.inputs \
                or int(rot.attributes["head_dim"]) != int(op.attributes["head_dim"]):
            continue
        touched = {*op.inputs, *op.outputs}
        if not any(touched.intersection(operators[k].outputs) for k in range(i + 1, j)):
            deferred[j] = i
    return deferred


def _cache_writes(c: Context, operators: Sequence[ValidatedOperator], i: int) -> int:
    """How many paged_cache_writes right after the rotary at `i` join its launch: the write of its
    rotated rows (1), then the write of unrotated values at the same slots of another plane (2)."""
    rot = operators[i]
    if i + 1 >= len(operators) or rot.inputs[0] == rot.outputs[0]:
        return 0
    first = operators[i + 1]
    if first.op != "paged_cache_write" or first.inputs[1] != rot.outputs[0] or first.inputs[3] != rot.inputs[1]:
        return 0
    if i + 2 >= len(operators):
        return 1
    second = operators[i + 2]
    values = second.inputs[1] if second.op == "paged_cache_write" else None
    if values is None or second.inputs[2:] != first.inputs[2:] or second.inputs[0] == first.inputs[0] \
            or values in (rot.outputs[0], first.inputs[0]) or rot.outputs[0] in second.inputs \
            or c.t(second.inputs[0]).shape != c.t(first.inputs[0]).shape \
            or list(c.decls[values].shape) != list(c.decls[rot.outputs[0]].shape):
        return 1
    return 2


def rotary_fusion(c: Context, operators: Sequence[ValidatedOperator], i: int, deferred: Mapping[int, int]) -> str | None:
    """The launch name of the rotary at `i` with what joins it, or None when nothing does."""
    name = ("head_rms_norm+" if i in deferred else "") + "rotary" + WRITE_SUFFIXES[_cache_writes(c, operators, i)]
    return None if name == "rotary" else name


def rotary_group(operators: Sequence[ValidatedOperator], i: int, fused: str, deferred: Mapping[int, int]
                 ) -> tuple[ValidatedOperator | None, tuple[ValidatedOperator, ...], tuple[int, ...]]:
    """(the deferred head norm or None, the cache writes, the operator indices covered) of the
    launch `fused` (a `rotary_fusion` name) of the rotary at `i`."""
    writes = tuple(operators[i + 1:i + 1 + WRITE_SUFFIXES.index(fused.partition("rotary")[2])])
    norm = operators[deferred[i]] if i in deferred else None
    covered = ((deferred[i],) if norm is not None else ()) + tuple(range(i, i + 1 + len(writes)))
    return norm, writes, covered
