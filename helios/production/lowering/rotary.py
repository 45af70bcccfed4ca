"""Rotary in the lowering (device side): the rope tables, the `rotary` and `paged_cache_write` lowerings,
and the fusions around `rotary` operators.

A layer's attention prologue in the recipes' order is

    head_rms_norm(q) -> qn ; head_rms_norm(k) -> kn ; rotary(qn) -> qr ; rotary(kn) -> kr ;
    paged_cache_write(key_cache, kr, ...) ; paged_cache_write(value_cache, v, ...)

(the head norms only where the program has them). A rotary's launch (`kernels/rotary.py`) also
covers, as a side of it:

  - the head norm that feeds it (`head_norm_deferrals`): taken when the norm's output is scratch
    read by that rotary alone, both split rows into the same heads, and nothing between the two
    writes the norm's input, weight or output, so running the norm where the rotary runs changes
    nothing; the kernel rounds the normalized rows to their dtype, as the unfused norm stores them;
  - the cache write of its rotated rows right after it, and then the cache write of another tensor
    (v) at the same slots (same token_lane, positions and page table) into another plane of the
    same shape (`_cache_writes`).

Two rotaries in a row with one rope and the same positions (q, then k with its writes) are one
launch of two sides when neither side reads what the other writes (`rotary_pair`). The launch is
named by its sides, e.g. "head_rms_norm+rotary & head_rms_norm+rotary+paged_cache_write*2". The
fusions key on operator patterns and readers only, never on a model: a layer's prologue (6 operators
with q and k head norms, 4 without) is one launch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from helios.production.kernels import rotary
from helios.production.lowering.context import Context
from helios.program.rope import rope_frequencies
from helios.program.validate import ValidatedOperator
from helios.proto import program_pb2

P = program_pb2
WRITE_SUFFIXES = ("", "+paged_cache_write", "+paged_cache_write*2")


def rope_tables(attributes: Mapping[str, object], device: torch.device) -> tuple[torch.Tensor, float]:
    """(inv_freq [rotary_dim / 2] f32 on `device`, attention factor), as the operator defines them."""
    scaling = {k: v for k, v in attributes.items() if k not in ("theta", "head_dim", "rotary_dim")}
    inv_freq, factor = rope_frequencies(theta=float(attributes["theta"]), rotary_dim=int(attributes["rotary_dim"]),
                                        **scaling)  # type: ignore[arg-type]
    return torch.from_numpy(inv_freq.copy()).to(device), float(factor)


def _tile(c: Context) -> dict:
    """The rows-a-program keyword of the rotary kernels: the GPU-paths mode's, else none (the device's)."""
    return {} if c.gpu_paths is None else {"rows_per_program": c.gpu_paths.rows_per_program}


def _rope(c: Context, rot: ValidatedOperator) -> dict:
    """The rope keywords of the rotary kernels for `rot` (with the tile, `_tile`); its tables are
    computed once per device and rope."""
    key = ("rope", tuple(sorted((k, v) for k, v in rot.attributes.items())))
    inv_freq, factor = c.arena.memo(key, lambda: rope_tables(rot.attributes, c.device))
    return dict(head_dim=int(rot.attributes["head_dim"]), inv_freq=inv_freq,
                rotary_dim=int(rot.attributes["rotary_dim"]), attention_factor=factor, **_tile(c))


def lower_rotary(c: Context, op: ValidatedOperator):
    """A rotary on its own (nothing joins its launch)."""
    x, positions, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    rope = _rope(c, op)
    return lambda: rotary.rotary_cache(x, positions, out=out, **rope)


def lower_paged_cache_write(c: Context, op: ValidatedOperator):
    """A cache write on its own: the rotary kernel with no rotation."""
    cache, values, lanes, positions, table = (c.t(n) for n in op.inputs)
    head_dim = cache.shape[3]
    tile = _tile(c)
    return lambda: rotary.rotary_cache(values, positions, head_dim=head_dim, cache=cache, token_lane=lanes,
                                       page_table=table, **tile)


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


def _side_name(c: Context, operators: Sequence[ValidatedOperator], i: int, deferred: Mapping[int, int]) -> str:
    return ("head_rms_norm+" if i in deferred else "") + "rotary" + WRITE_SUFFIXES[_cache_writes(c, operators, i)]


@dataclass(frozen=True, slots=True)
class RotarySide:
    """One tensor's share of a rotary launch: the head norm run in its prologue, the rotary, the
    cache writes (its rotated rows, then v) after it."""

    norm: ValidatedOperator | None
    rot: ValidatedOperator
    writes: tuple[ValidatedOperator, ...]

    def __post_init__(self) -> None:
        if len(self.writes) > 2:
            raise ValueError(f"a rotary side takes at most two cache writes, got {len(self.writes)}")

    @property
    def operators(self) -> tuple[ValidatedOperator, ...]:
        return ((self.norm,) if self.norm is not None else ()) + (self.rot, *self.writes)


def _pairs(c: Context, operators: Sequence[ValidatedOperator], i: int, deferred: Mapping[int, int]) -> bool:
    """Whether the rotaries at i and i + 1 (and what joins each) can be one launch of two sides."""
    if i + 1 >= len(operators) or operators[i + 1].op != "rotary":
        return False
    first, second = operators[i], operators[i + 1]
    if first.inputs[1] != second.inputs[1] or dict(first.attributes) != dict(second.attributes) \
            or c.decls[first.inputs[0]].shape[0] != c.decls[second.inputs[0]].shape[0]:
        return False
    sides = [_side(operators, k, _cache_writes(c, operators, k), deferred) for k in (i, i + 1)]
    reads = [{n for op in side.operators for n in op.inputs} for side in sides]
    writes = [{n for op in side.operators for n in op.outputs} for side in sides]
    return not (writes[0] & reads[1] or writes[1] & reads[0] or writes[0] & writes[1])


def _side(operators: Sequence[ValidatedOperator], i: int, writes: int, deferred: Mapping[int, int]) -> RotarySide:
    return RotarySide(operators[deferred[i]] if i in deferred else None, operators[i],
                      tuple(operators[i + 1:i + 1 + writes]))


def is_rotary_fusion(name: str) -> bool:
    return "rotary" in name.replace(" & ", "+").split("+")


def rotary_fusion(c: Context, operators: Sequence[ValidatedOperator], i: int, deferred: Mapping[int, int]) -> str | None:
    """The launch name of the rotary at `i` with what joins it, or None when nothing does."""
    name = _side_name(c, operators, i, deferred)
    if _pairs(c, operators, i, deferred):
        return f"{name} & {_side_name(c, operators, i + 1, deferred)}"
    return None if name == "rotary" else name


def rotary_group(operators: Sequence[ValidatedOperator], i: int, fused: str, deferred: Mapping[int, int]
                 ) -> tuple[tuple[RotarySide, ...], tuple[int, ...]]:
    """(the sides, the operator indices covered) of the launch `fused` (a `rotary_fusion` name) of
    the rotary at `i`."""
    sides = tuple(_side(operators, i + k, WRITE_SUFFIXES.index(name.partition("rotary")[2]), deferred)
                  for k, name in enumerate(fused.split(" & ")))
    covered = tuple(deferred[side_at] for side_at in range(i, i + len(sides)) if side_at in deferred)
    return sides, covered + tuple(range(i, i + len(sides) + len(sides[-1].writes)))


def unstored(sides: Sequence[RotarySide], covered: Sequence[int], readers: Mapping[str, list[int]],
             decls: Mapping[str, program_pb2.TensorDecl]) -> set[str]:
    """Outputs the launch never stores: each deferred norm's output, and the rotated rows of a side
    that writes them to the cache when they are scratch that nothing outside the launch reads."""
    skip = {side.norm.outputs[0] for side in sides if side.norm is not None}
    for side in sides:
        rotated = side.rot.outputs[0]
        if side.writes and decls[rotated].role == P.TENSOR_ROLE_SCRATCH \
                and all(r in covered for r in readers.get(rotated, ())):
            skip.add(rotated)
    return skip


def lower_rotary_fusion(c: Context, sides: Sequence[RotarySide], skip: set[str]):
    """The launch of one or two rotary sides whose outputs (but `skip`) are bound."""
    rot = sides[0].rot
    rope = _rope(c, rot)
    parts = [_side_tensors(c, side, skip) for side in sides]
    positions = c.t(rot.inputs[1])
    if len(parts) == 1:
        x, norm, out, extra = parts[0]
        return lambda: rotary.rotary_cache(x, positions, norm=norm, out=out, **rope, **extra)
    (q, q_norm, q_out, _), (k, k_norm, k_out, extra) = parts
    return lambda: rotary.rotary_pair(q, q_out, k, positions, q_norm=q_norm, k_norm=k_norm, k_out=k_out,
                                      **rope, **extra)


def _side_tensors(c: Context, side: RotarySide, skip: set[str]):
    """(rows, head norm, rotated output or None, cache-write keywords) of one side."""
    x = c.t((side.norm or side.rot).inputs[0])
    norm = None
    if side.norm is not None:
        attributes = side.norm.attributes
        norm = rotary.HeadNorm(c.t(side.norm.inputs[1]), float(attributes["eps"]),
                               float(attributes.get("weight_offset", 0.0)))
    out = None if side.rot.outputs[0] in skip else c.t(side.rot.outputs[0])
    extra: dict[str, torch.Tensor] = {}
    if side.writes:
        first = side.writes[0]
        extra.update(cache=c.t(first.inputs[0]), token_lane=c.t(first.inputs[2]), page_table=c.t(first.inputs[4]))
    if len(side.writes) > 1:
        extra.update(values=c.t(side.writes[1].inputs[1]), value_cache=c.t(side.writes[1].inputs[0]))
    return x, norm, out, extra
