"""The speculative operators of the set (host side): the specs of complete speculative generation.

One SPECULATIVE program draws proposals from a draft model, may score them (`token_probability`)
and allocate target rows by survival (`speculative_allocate`), packs the target's rows
(`speculative_pack`), verifies them (`speculative_verify`) and commits the accepted run
(`speculative_commit`); under per-position grammar masks, `speculative_grammar_mask` masks the
target's and the draft's rows before verification. Every per-lane tensor here is indexed by submission row `b` in `[0, B)`
(the lanes in the order the host submitted them, padding rows after them): `lane_order[b]` is the
lane's physical request slot, -1 on a padding row. `docs/operators.md` gives the exact semantics;
`helios.reference.speculative` is their executable definition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from helios.program.spec import AttributeSpec, AttributeValue, OperatorSpec, RuleError
from helios.program.types import F32, I32, I64, TensorType

Attrs = Mapping[str, AttributeValue]
Types = Sequence[TensorType]
Outs = Sequence[TensorType | None]

# Philox draw indices of one speculative position (docs/sampling.md "Speculative draws"): the draft's
# proposal, the acceptance test, and the target's own draw (the correction after a rejection and the
# bonus token after a fully accepted run use the word plain decoding uses at that position).
PROPOSAL_DRAW = 1
ACCEPTANCE_DRAW = 2
TARGET_DRAW = 0
SAMPLING_COLUMNS = 7


def _lanes(t: TensorType, what: str, rows: int | None = None) -> int:
    if t.dtype != I32 or t.rank != 1 or (rows is not None and t.shape[0] != rows):
        expect = f"[{rows}]" if rows is not None else "of rank 1"
        raise RuleError(f"{what} must be i32 {expect}, got {t}")
    return t.shape[0]


def _positive(attrs: Attrs, name: str) -> int:
    value = int(attrs[name])  # type: ignore[arg-type]
    if value < 1:
        raise RuleError(f"attribute {name} must be >= 1, got {value}")
    return value


def _sampling_rows(ins: Types, rows: int, width: int) -> None:
    """seed? parameters, histogram, grammar_mask of `rows` lanes over logits `width` wide."""
    parameters, histogram, grammar_mask = ins
    if parameters != TensorType(F32, (rows, SAMPLING_COLUMNS)):
        raise RuleError(f"parameters must be f32 [{rows}, {SAMPLING_COLUMNS}], got {parameters}")
    if histogram.dtype != I32 or histogram.rank != 2 or histogram.shape[0] != rows:
        raise RuleError(f"histogram must be i32 [{rows}, Vh], got {histogram}")
    if grammar_mask != TensorType(I32, (rows, (width + 31) // 32)):
        raise RuleError(f"grammar_mask must be i32 [{rows}, {(width + 31) // 32}], got {grammar_mask}")


def _token_probability(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    logits, ids = ins[0], ins[1]
    if logits.dtype != F32 or logits.rank != 2:
        raise RuleError(f"logits must be f32 [B, V], got {logits}")
    rows, width = logits.shape
    _lanes(ids, "ids", rows)
    _sampling_rows(ins[2:], rows, width)
    return [TensorType(F32, (rows,))]


def _speculative_allocate(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    confidence, ceilings, lane_order = ins
    if confidence.dtype != F32 or confidence.rank != 2:
        raise RuleError(f"confidence must be f32 [B, D], got {confidence}")
    rows = confidence.shape[0]
    _lanes(ceilings, "ceilings", rows)
    _lanes(lane_order, "lane_order", rows)
    if _positive(attrs, "packed_tokens") < rows:
        raise RuleError(f"packed_tokens {attrs['packed_tokens']} must hold one row for each of {rows} lanes")
    return [TensorType(I32, (rows,))]


def _speculative_pack(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    lane_order, lengths, consumed, candidates = ins
    rows = _lanes(lane_order, "lane_order", None)
    _lanes(lengths, "lengths", rows)
    _lanes(consumed, "consumed", rows)
    if candidates.dtype != I32 or candidates.rank != 2 or candidates.shape[0] != rows:
        raise RuleError(f"candidates must be i32 [{rows}, C], got {candidates}")
    packed = _positive(attrs, "packed_tokens")
    return [TensorType(I32, (packed,))] * 4


def _speculative_verify(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    logits, draft_logits, candidates, lengths, consumed, seed = ins[:6]
    if logits.dtype != F32 or logits.rank != 2:
        raise RuleError(f"logits must be f32 [P, V], got {logits}")
    width = logits.shape[1]
    if draft_logits.dtype != F32 or draft_logits.rank != 3 or draft_logits.shape[2] != width:
        raise RuleError(f"draft_logits must be f32 [B, D, {width}], got {draft_logits}")
    rows, drafts = draft_logits.shape[0], draft_logits.shape[1]
    if candidates != TensorType(I32, (rows, drafts + 1)):
        raise RuleError(f"candidates must be i32 [{rows}, {drafts + 1}] (pending token, then D proposals), "
                        f"got {candidates}")
    _lanes(lengths, "lengths", rows)
    _lanes(consumed, "consumed", rows)
    if seed != TensorType(I64, (rows,)):
        raise RuleError(f"seed must be i64 [{rows}], got {seed}")
    _sampling_rows(ins[6:], rows, width)
    verify = _positive(attrs, "verify_tokens")
    return [TensorType(I32, (rows, verify)), TensorType(I32, (rows,))]


def _speculative_commit(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    ids, accepted, lengths, consumed = ins
    if ids.dtype != I32 or ids.rank != 2:
        raise RuleError(f"ids must be i32 [B, W], got {ids}")
    rows = ids.shape[0]
    for t, what in ((accepted, "accepted"), (lengths, "lengths"), (consumed, "consumed")):
        _lanes(t, what, rows)
    return [TensorType(I32, (rows,))] * 3


def _copied_proposal(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    drawn, draft_logits, copied_ids, copied_count = ins
    rows = _lanes(drawn, "drawn", None)
    if draft_logits.dtype != F32 or draft_logits.rank != 2 or draft_logits.shape[0] != rows:
        raise RuleError(f"draft_logits must be f32 [{rows}, V], got {draft_logits}")
    if copied_ids.dtype != I32 or copied_ids.rank != 2 or copied_ids.shape[0] != rows:
        raise RuleError(f"copied_ids must be i32 [{rows}, D], got {copied_ids}")
    _lanes(copied_count, "copied_count", rows)
    index = int(attrs["index"])  # type: ignore[arg-type]
    if not 0 <= index < copied_ids.shape[1]:
        raise RuleError(f"attribute index must be in [0, {copied_ids.shape[1]}), got {index}")
    return [drawn, draft_logits]


def _speculative_grammar_mask(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    logits, draft_logits, masks, lengths = ins
    if logits.dtype != F32 or logits.rank != 2:
        raise RuleError(f"logits must be f32 [P, V], got {logits}")
    width = logits.shape[1]
    if draft_logits.dtype != F32 or draft_logits.rank != 3 or draft_logits.shape[2] != width:
        raise RuleError(f"draft_logits must be f32 [B, D, {width}], got {draft_logits}")
    rows = draft_logits.shape[0]
    words = (width + 31) // 32
    if masks.dtype != I32 or masks.rank != 3 or masks.shape[0] != rows or masks.shape[2] != words:
        raise RuleError(f"masks must be i32 [{rows}, W, {words}], got {masks}")
    _lanes(lengths, "lengths", rows)
    return [logits, draft_logits]


def _a(name: str, kind: str, doc: str, **kw: object) -> AttributeSpec:
    return AttributeSpec(name=name, kind=kind, doc=doc, **kw)  # type: ignore[arg-type]


_PACKED = _a("packed_tokens", "i", "P: the target rows of the program", required=True)
SINCE = 3
COPIED_SINCE = 4  # history drafting: copied proposals
GRAMMAR_SINCE = 5  # per-position grammar masks of a speculative round (CANDIDATE_GRAMMAR_MASKS)

SPECULATIVE_SPECS = (
    OperatorSpec("token_probability",
                 "the probability the sampling filters give ids[b] in row b (a proposal's confidence)",
                 ("logits", "ids", "parameters", "histogram", "grammar_mask"), ("probability",),
                 _token_probability, since=SINCE),
    OperatorSpec("speculative_allocate",
                 "target rows by frontier survival within P: FP64 products, shorter prefix, lower slot",
                 ("confidence", "ceilings", "lane_order"), ("lengths",), _speculative_allocate, (_PACKED,),
                 since=SINCE),
    OperatorSpec("speculative_pack",
                 "each lane's first lengths[b] candidates as packed rows, in submission order",
                 ("lane_order", "lengths", "consumed", "candidates"),
                 ("tokens", "positions", "next_positions", "token_lane"), _speculative_pack, (_PACKED,),
                 since=SINCE),
    OperatorSpec("speculative_verify",
                 "greedy or rejection-sampling acceptance of each lane's proposals, then its next token",
                 ("logits", "draft_logits", "candidates", "lengths", "consumed", "seed", "parameters",
                  "histogram", "grammar_mask"), ("ids", "accepted"), _speculative_verify,
                 (_a("verify_tokens", "i", "W: the ids row width", required=True),), since=SINCE),
    OperatorSpec("copied_proposal",
                 "proposal index + 1: the lane's copied id (its distribution one-hot) within its copied run, "
                 "else the draft's draw and logits",
                 ("drawn", "draft_logits", "copied_ids", "copied_count"), ("token", "logits"), _copied_proposal,
                 (_a("index", "i", "j: the proposal column (proposal j + 1)", required=True),), since=COPIED_SINCE),
    OperatorSpec("speculative_grammar_mask",
                 "in place: each lane's target row k and draft row k -inf where masks[b, k] forbids the id "
                 "(the per-position grammar masks of a speculative round)",
                 ("logits", "draft_logits", "masks", "lengths"), ("logits", "draft_logits"),
                 _speculative_grammar_mask, in_place=((0, 0), (1, 1)), since=GRAMMAR_SINCE),
    OperatorSpec("speculative_commit",
                 "each lane's next pending token, emitted count and consumed endpoint",
                 ("ids", "accepted", "lengths", "consumed"), ("pending", "emitted", "endpoint"),
                 _speculative_commit, since=SINCE),
)
