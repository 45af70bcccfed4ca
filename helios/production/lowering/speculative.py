"""The speculative operators' lowerings (device side): `kernels/speculative.py` on static tensors.

The samplers of `token_probability` and `speculative_verify` are memoized by role and shape like the
plain sampler, but with their own buffers: verification holds the target's and the draft's kept
weights at once. Both follow the device's `RankFilters` switch, as the plain sampler does.
"""

from __future__ import annotations

from helios.production.kernels import speculative
from helios.production.lowering.context import Context, rank_filters, sampler_storage
from helios.program.validate import ValidatedOperator


def _vocab_block(c: Context) -> int:
    return 4096 if c.gpu_paths is None else c.gpu_paths.vocab_block


def _rows_block(c: Context) -> dict:
    return {} if c.gpu_paths is None else {"block": c.gpu_paths.copy_block}


def lower_token_probability(c: Context, op: ValidatedOperator):
    logits, ids, parameters, histogram, mask = (c.t(n) for n in op.inputs)
    out = c.t(op.outputs[0])
    rows, vocab = logits.shape
    block = _vocab_block(c)
    switch = rank_filters(c.arena)
    storage = sampler_storage(c.arena)
    scorer = c.arena.memo(("token_probability", rows, vocab, block),
                          lambda: speculative.ProbabilityScorer(rows, vocab, c.device, block=block,
                                                                rank_filters=switch, storage=storage))
    return lambda: scorer(logits, ids, parameters, histogram, mask, out)


def lower_speculative_allocate(c: Context, op: ValidatedOperator):
    confidence, ceilings, lane_order = (c.t(n) for n in op.inputs)
    lengths = c.t(op.outputs[0])
    allocator = speculative.Allocator(int(op.attributes["packed_tokens"]), c.device)
    return lambda: allocator(confidence, ceilings, lane_order, lengths)


def lower_speculative_pack(c: Context, op: ValidatedOperator):
    lane_order, lengths, consumed, candidates = (c.t(n) for n in op.inputs)
    tokens, positions, next_positions, token_lane = (c.t(n) for n in op.outputs)
    block = _rows_block(c)
    return lambda: speculative.speculative_pack(lane_order, lengths, consumed, candidates, tokens, positions,
                                                next_positions, token_lane, **block)


def lower_speculative_verify(c: Context, op: ValidatedOperator):
    logits, draft_logits, candidates, lengths, consumed, seed, parameters, histogram, mask = (
        c.t(n) for n in op.inputs)
    ids, accepted = c.t(op.outputs[0]), c.t(op.outputs[1])
    packed, vocab = logits.shape
    lanes, drafts = draft_logits.shape[0], draft_logits.shape[1]
    block = _vocab_block(c)
    key = ("speculative_verify", packed, lanes, drafts, vocab, histogram.shape[1], mask.shape[1], block)
    switch = rank_filters(c.arena)
    storage = sampler_storage(c.arena)
    verifier = c.arena.memo(key, lambda: speculative.Verifier(packed, lanes, drafts, vocab, histogram.shape[1],
                                                              mask.shape[1], c.device, block=block,
                                                              rank_filters=switch, storage=storage))
    return lambda: verifier(logits, draft_logits, candidates, lengths, consumed, seed, parameters, histogram, mask,
                            ids, accepted)


def lower_speculative_commit(c: Context, op: ValidatedOperator):
    ids, accepted, lengths, consumed = (c.t(n) for n in op.inputs)
    pending, emitted, endpoint = (c.t(n) for n in op.outputs)
    block = _rows_block(c)
    return lambda: speculative.speculative_commit(ids, accepted, lengths, consumed, pending, emitted, endpoint,
                                                  **block)


def lower_copied_proposal(c: Context, op: ValidatedOperator):
    drawn, draft_logits, copied_ids, copied_count = (c.t(n) for n in op.inputs)
    token, logits = c.t(op.outputs[0]), c.t(op.outputs[1])
    index, block = int(op.attributes["index"]), _vocab_block(c)
    return lambda: speculative.copied_proposal(drawn, draft_logits, copied_ids, copied_count, token, logits,
                                               index=index, block=block)


def lower_speculative_grammar_mask(c: Context, op: ValidatedOperator):
    logits, draft_logits, masks, lengths = (c.t(n) for n in op.inputs)  # the outputs are the first two
    block = _vocab_block(c)
    return lambda: speculative.speculative_grammar_mask(logits, draft_logits, masks, lengths, block=block)
