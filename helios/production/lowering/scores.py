"""The prompt-score operator's lowering (device side): `kernels/scores.py` on static tensors."""

from __future__ import annotations

from helios.production.kernels.scores import PromptScorer
from helios.production.lowering.context import Context, sampler_storage
from helios.program.validate import ValidatedOperator


def lower_prompt_scores(c: Context, op: ValidatedOperator):
    scores, ids, logits, targets = (c.t(n) for n in op.inputs)
    rows, vocab = logits.shape
    scorer = PromptScorer(rows, vocab, ids.shape[1], c.device, sampler_storage(c.arena))
    return lambda: scorer(logits, targets, scores, ids)
