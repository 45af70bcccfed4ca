"""The prompt-score operator of the set (host side): the spec of `prompt_scores` (version 4).

A SCORED_PREFILL program consumes a prompt chunk like PREFILL and also scores it: every packed row's
f32 logits give the log-probability of the row's scored-prefill target (the prompt token that follows
the row's own) and the row's K most likely ids with their log-probabilities. `prompt_scores` writes
them in place into the first P rows of two completion buffers, so the host reads a round's scores
beside its completion record. `docs/operators.md` gives the exact semantics; the NumPy function
`helios.reference.scores.prompt_scores` is its executable definition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from helios.program.spec import AttributeValue, OperatorSpec, RuleError
from helios.program.types import F32, I32, TensorType

SINCE = 4


def _prompt_scores(ins: Sequence[TensorType], attrs: Mapping[str, AttributeValue],
                   outs: Sequence[TensorType | None]) -> list[TensorType]:
    scores, ids, logits, targets = ins
    if logits.dtype != F32 or logits.rank != 2:
        raise RuleError(f"logits must be f32 [P, V], got {logits}")
    rows, width = logits.shape
    if targets != TensorType(I32, (rows,)):
        raise RuleError(f"targets must be i32 [{rows}], got {targets}")
    if ids.dtype != I32 or ids.rank != 2 or ids.shape[0] < rows or not 1 <= ids.shape[1] <= width:
        raise RuleError(f"ids must be i32 [R >= {rows}, K] with 1 <= K <= {width}, got {ids}")
    top = ids.shape[1]
    if scores != TensorType(F32, (ids.shape[0], top + 1)):
        raise RuleError(f"scores must be f32 [{ids.shape[0]}, {top + 1}] (the target's, then the top {top}), "
                        f"got {scores}")
    return [scores, ids]


SCORE_SPECS = (
    OperatorSpec("prompt_scores",
                 "per row: the log-softmax of logits at the target, and the top K ids and log-probabilities",
                 ("scores", "ids", "logits", "targets"), ("scores", "ids"), _prompt_scores,
                 in_place=((0, 0), (1, 1)), since=SINCE),
)
