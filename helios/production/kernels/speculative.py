"""Speculative operators (device side): `token_probability`, `speculative_allocate`,
`speculative_pack`, `speculative_verify`, `speculative_commit`, `copied_proposal` and
`speculative_grammar_mask` (docs/operators.md "Speculative
operators"; `helios.reference.speculative` is their definition, reproduced bit for bit).

Every filter a speculative row passes through is the sampler's: `Sampler.kept_weights`
(kernels/sampling.py) gives a row's kept fixed-point weights in id order, their block sums and its
greedy id, so the probabilities here are exactly the ones `sample` draws from. What is new:

  `_probability_kernel`  one program per row: `kept[id] / total` in FP64, rounded to FP32;
  `_allocate_kernel`     one program a round: the frontier rule, one row per iteration, FP64 survivals;
  `_pack_kernel`         blocks of packed rows: each row's lane, candidate and position;
  `_verify_kernel`       one program per lane: the acceptance test of each proposal in 32-bit fixed
                         point, the residual draw after a rejection (two passes over the vocabulary,
                         only then), the plain sampler's token as the bonus;
  `_commit_kernel`       one block of lanes: pending token, emitted count, consumed endpoint;
  `_copied_kernel`       (lane, vocabulary block) programs: a copied proposal and its one-hot row,
                         or the draft's draw and row (history drafting);
  `_target_mask_kernel`, `_draft_mask_kernel`
                         (row, vocabulary block) programs: -inf at the ids a row's position mask
                         forbids (the per-position grammar masks of a speculative round).

All of it runs on static buffers with no host synchronisation, so a speculative program captures
into one CUDA graph. The rank stage (top-k, top-p, min-p) runs as the device's `RankFilters` switch
says (given by the lowering; a sampler built without one always runs it): a round none of whose
lanes filters by rank skips its sort, and the kept weights are the same (docs: kernels/sampling.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from helios.production.kernels.sampling import RankFilters, Sampler, SamplerStorage
from helios.program.speculative import ACCEPTANCE_DRAW, TARGET_DRAW

_BIG = 2**30  # larger than any length, slot or submission row


@triton.jit
def _probability_kernel(kept_ptr, block_sum_ptr, greedy_ptr, ids_ptr, out_ptr, vocab, blocks,
                        BLOCKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    b = tl.arange(0, BLOCKS)
    total = tl.sum(tl.load(block_sum_ptr + row * blocks + b, mask=b < blocks, other=0), axis=0)
    token = tl.load(ids_ptr + row)
    valid = (token >= 0) & (token < vocab) & (tl.load(greedy_ptr + row) >= 0) & (total > 0)
    kept = tl.load(kept_ptr + row * vocab + tl.where(valid, token, 0).to(tl.int64))
    probability = kept.to(tl.float64) / tl.where(valid, total, 1).to(tl.float64)
    tl.store(out_ptr + row, tl.where(valid, probability.to(tl.float32), 0.0))


class ProbabilityScorer:
    """Static buffers and launches of `token_probability` for one (rows, vocab) shape."""

    def __init__(self, rows: int, vocab: int, device: torch.device | str, *, block: int = 4096,
                 rank_filters: RankFilters | None = None, storage: SamplerStorage | None = None) -> None:
        self.sampler = Sampler(rows, vocab, device, block=block, rank_filters=rank_filters or RankFilters(),
                               storage=storage)
        # [rows, 7] f32: the rows' parameters, a greedy row's scored at temperature 1 without rank filters
        self.scored = torch.zeros((rows, 7), dtype=torch.float32, device=device)
        # temperature, top_p, top_k, min_p of a greedy row's score
        self.neutral = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float32, device=device)

    def __call__(self, logits: torch.Tensor, ids: torch.Tensor, parameters: torch.Tensor, histogram: torch.Tensor,
                 grammar_mask: torch.Tensor, out: torch.Tensor) -> None:
        self.scored.copy_(parameters)
        greedy = ~(parameters[:, 0:1] > 0)  # NaN temperature is greedy too, as the reference reads it
        self.scored[:, 0:4] = torch.where(greedy, self.neutral, parameters[:, 0:4])
        s = self.sampler
        kept = s.kept_weights(logits, self.scored, histogram, grammar_mask)
        _probability_kernel[(s.rows,)](kept, s.block_sum, s.greedy, ids, out, s.vocab, s.blocks,
                                       BLOCKS=s.blocks_pow2)


@triton.jit
def _confidence(c):
    c = tl.where(c != c, 0.0, c)  # NaN reads 0
    return tl.minimum(tl.maximum(c, 0.0), 1.0)


@triton.jit
def _allocate_kernel(confidence_ptr, ceilings_ptr, lane_order_ptr, packed_ptr, lengths_ptr, rounds, rows, drafts,
                     steps, ROUNDS: tl.constexpr, ROWS: tl.constexpr, BIG: tl.constexpr):
    # program: ROUNDS independent rounds (one for the operator), a round's lanes along axis 1. Every
    # lane starts at length 1, then each free row goes to the open lane of the highest frontier
    # survival (FP64), the shorter prefix on ties, then the lower slot (then the lower row)
    g = tl.program_id(0) * ROUNDS + tl.arange(0, ROUNDS)[:, None]
    b = tl.arange(0, ROWS)[None, :]
    inside = (g < rounds) & (b < rows)
    lane = g * rows + b
    slot = tl.load(lane_order_ptr + lane, mask=inside, other=-1)
    ceiling = tl.load(ceilings_ptr + lane, mask=inside, other=0)
    live = inside & (slot >= 0) & (ceiling >= 1)
    limit = tl.minimum(ceiling, drafts + 1)
    length = live.to(tl.int32)
    first = tl.load(confidence_ptr + lane * drafts, mask=(live & (limit > 1)) != 0, other=0.0)
    survival = _confidence(first).to(tl.float64)  # of each lane's frontier: conf[0] * ... * conf[length - 1]
    free = tl.load(packed_ptr + g, mask=g < rounds, other=0) - tl.sum(length, axis=1)[:, None]
    for i in range(0, steps):
        eligible = live & (length < limit) & (i < free)
        best = tl.max(tl.where(eligible, survival, -1.0), axis=1)[:, None]
        pick = eligible & (survival == best)
        pick = pick & (length == tl.min(tl.where(pick, length, BIG), axis=1)[:, None])
        pick = pick & (slot == tl.min(tl.where(pick, slot, BIG), axis=1)[:, None])
        pick = pick & (b == tl.min(tl.where(pick, b, BIG), axis=1)[:, None])
        # NOTE: `!= 0` keeps the mask boolean in the interpreter (there `&` with the loop's bound can
        # leave int32 data under an int1 type, which a masked load refuses)
        extends = (pick & (length + 1 < limit)) != 0
        following = tl.load(confidence_ptr + lane * drafts + length, mask=extends, other=0.0)
        survival = tl.where(pick, survival * _confidence(following).to(tl.float64), survival)
        length = length + pick.to(tl.int32)
    tl.store(lengths_ptr + lane, length, mask=inside)


def allocate_rounds(confidence: torch.Tensor, ceilings: torch.Tensor, lane_order: torch.Tensor,
                    packed: torch.Tensor, lengths: torch.Tensor, *, steps: int, rounds_block: int = 1) -> None:
    """`speculative_allocate` of G independent rounds: confidence [G, B, D] f32, ceilings and
    lane_order [G, B] i32, packed [G] i32 (each round's P), lengths [G, B] i32 out; `steps` >= every
    round's P (the iterations of the frontier loop), `rounds_block` rounds a program."""
    rounds, rows, drafts = confidence.shape
    block = triton.next_power_of_2(max(min(rounds_block, rounds), 1))
    _allocate_kernel[(triton.cdiv(rounds, block),)](confidence, ceilings, lane_order, packed, lengths, rounds, rows,
                                                    drafts, int(steps), ROUNDS=block,
                                                    ROWS=triton.next_power_of_2(max(rows, 1)), BIG=_BIG)


class Allocator:
    """`speculative_allocate` for one P: the operator is one round of `allocate_rounds`. The program
    validates `packed_tokens >= B`, so the lanes' first rows always fit."""

    def __init__(self, packed_tokens: int, device: torch.device | str) -> None:
        self.steps = int(packed_tokens)
        self.packed = torch.full((1,), self.steps, dtype=torch.int32, device=device)  # [1] i32, static

    def __call__(self, confidence: torch.Tensor, ceilings: torch.Tensor, lane_order: torch.Tensor,
                 lengths: torch.Tensor) -> None:
        rows, drafts = confidence.shape
        allocate_rounds(confidence.reshape(1, rows, drafts), ceilings.reshape(1, rows),
                        lane_order.reshape(1, rows), self.packed, lengths.reshape(1, rows), steps=self.steps)


@triton.jit
def _pack_kernel(lane_order_ptr, lengths_ptr, consumed_ptr, candidates_ptr, tokens_ptr, positions_ptr,
                 next_ptr, lane_ptr, lanes, width, packed, BLOCK: tl.constexpr, SUBMISSION_ROWS: tl.constexpr):
    # rows [pid * BLOCK, +BLOCK): the lanes' rows in submission order; SUBMISSION_ROWS: lane_ptr
    # receives the submission row b instead of the slot lane_order[b]
    t = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = t < packed
    token = tl.full([BLOCK], -1, tl.int32)
    position = tl.zeros([BLOCK], tl.int32)
    lane = tl.full([BLOCK], -1, tl.int32)
    filled = t < 0
    start = tl.zeros((), tl.int32)
    for b in range(0, lanes):
        n = tl.minimum(tl.maximum(tl.load(lengths_ptr + b), 0), width)
        mine = inside & (t >= start) & (t < start + n)
        k = t - start
        token = tl.where(mine, tl.load(candidates_ptr + b * width + k, mask=mine, other=-1), token)
        position = tl.where(mine, tl.load(consumed_ptr + b) + k, position)
        if SUBMISSION_ROWS:
            lane = tl.where(mine, b, lane)
        else:
            lane = tl.where(mine, tl.load(lane_order_ptr + b), lane)
        filled = filled | mine
        start += n
    tl.store(tokens_ptr + t, token, mask=inside)
    tl.store(positions_ptr + t, position, mask=inside)
    tl.store(next_ptr + t, tl.where(filled, position + 1, 0), mask=inside)
    tl.store(lane_ptr + t, lane, mask=inside)


def speculative_pack(lane_order: torch.Tensor, lengths: torch.Tensor, consumed: torch.Tensor,
                     candidates: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
                     next_positions: torch.Tensor, token_lane: torch.Tensor, *, block: int = 1024,
                     submission_rows: bool = False) -> None:
    """The packed target rows of docs/operators.md (rows past P are not written: the host keeps
    the lengths within P). `submission_rows`: `token_lane` receives each row's submission row b."""
    lanes, width = candidates.shape
    packed = tokens.shape[0]
    block = min(block, triton.next_power_of_2(packed))
    _pack_kernel[(triton.cdiv(packed, block),)](lane_order, lengths, consumed, candidates, tokens, positions,
                                                next_positions, token_lane, lanes, width, packed, BLOCK=block,
                                                SUBMISSION_ROWS=submission_rows)


@triton.jit
def _fixed(kept, total):
    # P = floor(kept * 2^32 / total); kept <= 2^24, so the shift stays in int64; 0 where total is 0
    return (kept << 32) // tl.maximum(total, 1)


@triton.jit
def _residual_draw(target_ptr, draft_ptr, total_p, total_q, word, vocab, BLOCK: tl.constexpr):
    # step 8 over max(0, P - Q) (over P when that is empty): pass 1 sums, pass 2 finds the first id
    # whose inclusive cumulative weight exceeds target = (word * total) >> 32
    residual_total = tl.zeros((), tl.int64)
    fixed_total = tl.zeros((), tl.int64)
    for begin in range(0, vocab, BLOCK):
        ids = begin + tl.arange(0, BLOCK)
        p = _fixed(tl.load(target_ptr + ids, mask=ids < vocab, other=0), total_p)
        q = _fixed(tl.load(draft_ptr + ids, mask=ids < vocab, other=0), total_q)
        residual_total += tl.sum(tl.maximum(p - q, 0), axis=0)
        fixed_total += tl.sum(p, axis=0)
    use_p = residual_total == 0
    total = tl.where(use_p, fixed_total, residual_total).to(tl.uint64)
    # (word * total) >> 32 without 64-bit overflow: total = hi * 2^32 + lo
    target = (word * (total >> 32) + ((word * (total & 0xFFFFFFFF)) >> 32)).to(tl.int64)
    before = tl.zeros((), tl.int64)
    found = tl.zeros((), tl.int32) + vocab
    for begin in range(0, vocab, BLOCK):
        ids = begin + tl.arange(0, BLOCK)
        p = _fixed(tl.load(target_ptr + ids, mask=ids < vocab, other=0), total_p)
        q = _fixed(tl.load(draft_ptr + ids, mask=ids < vocab, other=0), total_q)
        weight = tl.where(use_p, p, tl.maximum(p - q, 0))
        cumulative = tl.cumsum(weight, axis=0) + before
        found = tl.minimum(found, tl.min(tl.where((cumulative > target) & (ids < vocab), ids, vocab), axis=0))
        before += tl.sum(weight, axis=0)
    return tl.where(found < vocab, found, -1)


@triton.jit
def _total(block_sum_ptr, row, blocks, BLOCKS: tl.constexpr):
    b = tl.arange(0, BLOCKS)
    return tl.sum(tl.load(block_sum_ptr + row * blocks + b, mask=b < blocks, other=0), axis=0)


@triton.jit
def _verify_kernel(target_kept_ptr, target_sum_ptr, target_greedy_ptr, plain_ptr, draft_kept_ptr, draft_sum_ptr,
                   candidates_ptr, lengths_ptr, consumed_ptr, seed_ptr, params_ptr, ids_ptr, accepted_ptr,
                   lanes, drafts, packed, vocab, blocks, verify, acceptance_draw, target_draw,
                   LANES: tl.constexpr, BLOCK: tl.constexpr, BLOCKS: tl.constexpr, WIDTH: tl.constexpr):
    # program (lane b): proposal k (k = 1 .. L - 1) at position consumed + k, judged by target row
    # start + k - 1 and drawn from draft row b * D + k - 1:
    #
    #   target rows  | start: pending | start+1: proposal 1 | ... | start+L-1: proposal L-1 |
    #   judge        |   proposal 1   |     proposal 2      | ... |   bonus (plain draw)     |
    b = tl.program_id(0)
    others = tl.arange(0, LANES)
    start = tl.sum(tl.where(others < b, tl.maximum(tl.load(lengths_ptr + others, mask=others < lanes, other=0), 0),
                            0), axis=0)
    length = tl.minimum(tl.load(lengths_ptr + b), drafts + 1)
    cols = tl.arange(0, WIDTH)
    tl.store(ids_ptr + b * verify + cols, -1, mask=cols < verify)
    sampled = tl.load(params_ptr + b * 7) > 0
    seed = tl.load(seed_ptr + b)
    consumed = tl.load(consumed_ptr + b).to(tl.int64)
    count = tl.zeros((), tl.int32)
    done = (length <= 0).to(tl.int32)  # a padding row emits nothing
    for k in range(1, drafts + 1):
        live = (done == 0) & (k < length)
        t = tl.minimum(start + k - 1, packed - 1).to(tl.int64)
        r = (b * drafts + k - 1).to(tl.int64)
        proposal = tl.load(candidates_ptr + b * (drafts + 1) + k)
        greedy = tl.load(target_greedy_ptr + t)  # -1: the mask allows nothing
        total_p = _total(target_sum_ptr, t, blocks, BLOCKS)
        total_q = _total(draft_sum_ptr, r, blocks, BLOCKS)
        inside = (proposal >= 0) & (proposal < vocab)
        x = tl.where(inside, proposal, 0).to(tl.int64)
        p_x = tl.where(inside, _fixed(tl.load(target_kept_ptr + t * vocab + x), total_p), 0).to(tl.uint64)
        q_x = tl.where(inside, _fixed(tl.load(draft_kept_ptr + r * vocab + x), total_q), 0).to(tl.uint64)
        position = consumed + k
        word = tl.randint(seed, (position << 32) | acceptance_draw).to(tl.uint64)
        # NOTE: p_x << 32 wraps only at p_x = 2^32, where p_x >= q_x already accepts
        accept_sampled = (p_x >= q_x) | (word * q_x < (p_x << 32))
        accept = (greedy >= 0) & tl.where(sampled, accept_sampled, proposal == greedy)
        final = greedy  # a greedy lane's correction; -1 when the mask allows nothing
        if live & sampled & (greedy >= 0) & (accept == 0):
            correction = tl.randint(seed, (position << 32) | target_draw).to(tl.uint64)
            final = _residual_draw(target_kept_ptr + t * vocab, draft_kept_ptr + r * vocab, total_p, total_q,
                                   correction, vocab, BLOCK)
        tl.store(ids_ptr + b * verify + count, tl.where(accept, proposal, final), mask=live & (count < verify))
        count += live.to(tl.int32)
        done = done | (live & (accept == 0)).to(tl.int32)
    bonus = tl.load(plain_ptr + tl.minimum(tl.maximum(start + length - 1, 0), packed - 1))
    tl.store(ids_ptr + b * verify + count, bonus, mask=(done == 0) & (count < verify))
    count += (done == 0).to(tl.int32)
    tl.store(accepted_ptr + b, tl.maximum(count - 1, 0))


class Verifier:
    """Static buffers and launches of `speculative_verify` for one (P, B, D, V, Vh) shape: the target's
    rows and the draft's rows through their own samplers, under each lane's parameters. Where the
    reference raises (lengths summing past P, a length past D + 1: errors of the round the host
    never submits), the kernels stay inside their buffers: rows clamp to P - 1, lengths to D + 1."""

    def __init__(self, packed: int, lanes: int, drafts: int, vocab: int, histogram_width: int, mask_words: int,
                 device: torch.device | str, *, block: int = 4096, rank_filters: RankFilters | None = None,
                 storage: SamplerStorage | None = None) -> None:
        self.packed, self.lanes, self.drafts, self.vocab = packed, lanes, drafts, vocab
        switch = rank_filters or RankFilters()
        # in a shared storage the draft rows' kept weights lie beside the target rows' (slot 1): the
        # verification reads both (their scratch rows are slot 0's, dead by then)
        self.target = Sampler(packed, vocab, device, block=block, rank_filters=switch, storage=storage)
        self.draft = Sampler(lanes * drafts, vocab, device, block=block, rank_filters=switch, storage=storage, slot=1)
        i32 = dict(dtype=torch.int32, device=device)
        self.row_lane = torch.zeros(packed, **i32)  # [P] i32: each target row's submission row, -1 padding
        self.row_positions = torch.zeros(packed, **i32)  # [P] i32: its position (consumed + k)
        self.row_index = torch.zeros(packed, **i32)  # [P] i32: row_lane, padding read as row 0
        self.row_scratch = torch.zeros((2, packed), **i32)  # tokens and next positions, unread
        self.plain = torch.zeros(packed, **i32)  # [P] i32: the plain sampler's token of each target row
        self.row_parameters = torch.zeros((packed, 7), dtype=torch.float32, device=device)
        self.row_histogram = torch.zeros((packed, histogram_width), **i32)
        self.row_mask = torch.zeros((packed, mask_words), **i32)
        self.row_seed = torch.zeros(packed, dtype=torch.int64, device=device)
        self.draft_lane = torch.div(torch.arange(lanes * drafts, device=device), max(drafts, 1),
                                    rounding_mode="floor")  # [B * D] i64: b of draft row b * D + k
        self.draft_parameters = torch.zeros((lanes * drafts, 7), dtype=torch.float32, device=device)
        self.draft_histogram = torch.zeros((lanes * drafts, histogram_width), **i32)
        self.draft_mask = torch.zeros((lanes * drafts, mask_words), **i32)

    def __call__(self, logits: torch.Tensor, draft_logits: torch.Tensor, candidates: torch.Tensor,
                 lengths: torch.Tensor, consumed: torch.Tensor, seed: torch.Tensor, parameters: torch.Tensor,
                 histogram: torch.Tensor, grammar_mask: torch.Tensor, ids: torch.Tensor, accepted: torch.Tensor
                 ) -> None:
        speculative_pack(lengths, lengths, consumed, candidates, self.row_scratch[0], self.row_positions,
                         self.row_scratch[1], self.row_lane, submission_rows=True)
        # NOTE: max too: kernel discovery at startup runs the torch ops of a plan but not its Triton
        # launches, so row_lane may hold whatever the pack kernel has not written; an index past the
        # lanes would fail the index_select below (a device-side assert on a GPU)
        torch.clamp(self.row_lane, min=0, max=self.lanes - 1, out=self.row_index)
        for source, rows, index in ((parameters, self.row_parameters, self.row_index),
                                    (histogram, self.row_histogram, self.row_index),
                                    (grammar_mask, self.row_mask, self.row_index),
                                    (seed, self.row_seed, self.row_index),
                                    (parameters, self.draft_parameters, self.draft_lane),
                                    (histogram, self.draft_histogram, self.draft_lane),
                                    (grammar_mask, self.draft_mask, self.draft_lane)):
            torch.index_select(source, 0, index, out=rows)
        target, draft = self.target, self.draft
        target_kept = target.kept_weights(logits, self.row_parameters, self.row_histogram, self.row_mask)
        # row k of a lane sits at position consumed + k: its plain draw is the token at consumed + k + 1
        target.draw(target_kept, self.row_parameters, self.row_seed, self.row_positions, self.plain,
                    draw_index=TARGET_DRAW)
        draft_kept = target_kept
        if self.drafts:
            draft_kept = draft.kept_weights(draft_logits.reshape(self.lanes * self.drafts, self.vocab),
                                            self.draft_parameters, self.draft_histogram, self.draft_mask)
        _verify_kernel[(self.lanes,)](
            target_kept, target.block_sum, target.greedy, self.plain, draft_kept, draft.block_sum, candidates,
            lengths, consumed, seed, parameters, ids, accepted, self.lanes, self.drafts, self.packed, self.vocab,
            target.blocks, ids.shape[1], ACCEPTANCE_DRAW, TARGET_DRAW,
            LANES=triton.next_power_of_2(self.lanes), BLOCK=target.block, BLOCKS=target.blocks_pow2,
            WIDTH=triton.next_power_of_2(ids.shape[1]))


@triton.jit
def _commit_kernel(ids_ptr, accepted_ptr, lengths_ptr, consumed_ptr, pending_ptr, emitted_ptr, endpoint_ptr,
                   lanes, width, BLOCK: tl.constexpr):
    b = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = b < lanes
    live = inside & (tl.load(lengths_ptr + b, mask=inside, other=0) > 0)
    accepted = tl.load(accepted_ptr + b, mask=inside, other=0)
    last = tl.minimum(tl.maximum(accepted, 0), width - 1)
    pending = tl.load(ids_ptr + b * width + last, mask=live, other=-1)
    emitted = tl.where(live, accepted + 1, 0)
    endpoint = tl.where(live, tl.load(consumed_ptr + b, mask=inside, other=0) + emitted, 0)
    tl.store(pending_ptr + b, pending, mask=inside)
    tl.store(emitted_ptr + b, emitted, mask=inside)
    tl.store(endpoint_ptr + b, endpoint, mask=inside)


def speculative_commit(ids: torch.Tensor, accepted: torch.Tensor, lengths: torch.Tensor, consumed: torch.Tensor,
                       pending: torch.Tensor, emitted: torch.Tensor, endpoint: torch.Tensor, *,
                       block: int = 1024) -> None:
    """Each lane's next pending token, emitted count and consumed endpoint (docs/operators.md)."""
    lanes, width = ids.shape
    block = min(block, triton.next_power_of_2(lanes))
    _commit_kernel[(triton.cdiv(lanes, block),)](ids, accepted, lengths, consumed, pending, emitted, endpoint,
                                                 lanes, width, BLOCK=block)


@triton.jit
def _copied_kernel(drawn_ptr, logits_ptr, ids_ptr, count_ptr, token_ptr, out_ptr, drafts, vocab, index,
                   stride_logits, stride_out, BLOCK: tl.constexpr, DRAFTS: tl.constexpr):
    # program (lane b, vocabulary block): within b's copied run (index < count and every copied id up
    # to index inside [0, vocab)) the copied id and its one-hot row (0 there, -inf elsewhere), else
    # the draft's draw and row
    b = tl.program_id(0).to(tl.int64)
    k = tl.arange(0, DRAFTS)
    ids = tl.load(ids_ptr + b * drafts + k, mask=k < drafts, other=-1)
    invalid = (k <= index) & ((ids < 0) | (ids >= vocab))
    copied = (tl.sum(invalid.to(tl.int32), axis=0) == 0) & (index < tl.load(count_ptr + b))
    mine = tl.sum(tl.where(k == index, ids, 0), axis=0)
    token = tl.where(copied, mine, tl.load(drawn_ptr + b))
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = columns < vocab
    row = tl.load(logits_ptr + b * stride_logits + columns, mask=inside, other=0.0)
    one_hot = tl.where(columns == token, 0.0, float("-inf"))
    tl.store(out_ptr + b * stride_out + columns, tl.where(copied, one_hot, row), mask=inside)
    if tl.program_id(1) == 0:
        tl.store(token_ptr + b, token)


def copied_proposal(drawn: torch.Tensor, draft_logits: torch.Tensor, copied_ids: torch.Tensor,
                    copied_count: torch.Tensor, token: torch.Tensor, logits: torch.Tensor, *, index: int,
                    block: int = 4096) -> None:
    """Proposal `index + 1` of each lane and the row it is judged as drawn from (docs/operators.md
    `copied_proposal`): one launch of (lanes, vocabulary blocks) programs."""
    lanes, vocab = draft_logits.shape
    drafts = copied_ids.shape[1]
    block = min(block, triton.next_power_of_2(vocab))
    _copied_kernel[(lanes, triton.cdiv(vocab, block))](
        drawn, draft_logits, copied_ids, copied_count, token, logits, drafts, vocab, index,
        draft_logits.stride(0), logits.stride(0), BLOCK=block, DRAFTS=triton.next_power_of_2(max(drafts, 1)))


@triton.jit
def _forbid(row_ptr, masks_ptr, mask_row, live, vocab, words, BLOCK: tl.constexpr):
    # -inf at the ids of this vocabulary block that mask row `mask_row` forbids (bit t % 32 of word
    # t // 32); allowed ids are not touched. An arithmetic shift keeps bit t % 32 at bit 0.
    ids = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    # NOTE: `!= 0` keeps the masks boolean in the interpreter (see `_allocate_kernel`)
    inside = ((ids < vocab) & live) != 0
    word = tl.load(masks_ptr + mask_row.to(tl.int64) * words + ids // 32, mask=inside, other=-1)
    forbidden = (inside & (((word >> (ids % 32)) & 1) == 0)) != 0
    tl.store(row_ptr + ids, tl.full([BLOCK], float("-inf"), tl.float32), mask=forbidden)


@triton.jit
def _target_mask_kernel(logits_ptr, masks_ptr, lengths_ptr, lanes, positions, vocab, words, stride_row,
                        BLOCK: tl.constexpr):
    # program (packed target row t, vocabulary block): t's lane b and index k in the packed layout
    # (lanes in submission order, each max(lengths[b], 0) rows), masked by masks[b, k] for k < W
    t = tl.program_id(0)
    start = tl.zeros((), tl.int32)
    lane = tl.zeros((), tl.int32) - 1
    k = tl.zeros((), tl.int32)
    for b in range(0, lanes):
        n = tl.maximum(tl.load(lengths_ptr + b), 0)
        mine = (t >= start) & (t < start + n)
        lane = tl.where(mine, b, lane)
        k = tl.where(mine, t - start, k)
        start += n
    live = (lane >= 0) & (k < positions)
    _forbid(logits_ptr + t.to(tl.int64) * stride_row, masks_ptr, lane * positions + k, live, vocab, words, BLOCK)


@triton.jit
def _draft_mask_kernel(draft_ptr, masks_ptr, drafts, positions, vocab, words, BLOCK: tl.constexpr):
    # program (draft row r = b * D + j, vocabulary block): masked by masks[b, j] for j < W
    r = tl.program_id(0)
    b, j = r // drafts, r % drafts
    _forbid(draft_ptr + r.to(tl.int64) * vocab, masks_ptr, b * positions + j, j < positions, vocab, words, BLOCK)


def speculative_grammar_mask(logits: torch.Tensor, draft_logits: torch.Tensor, masks: torch.Tensor,
                             lengths: torch.Tensor, *, block: int = 4096) -> None:
    """In place (docs/operators.md `speculative_grammar_mask`): each lane's packed target row k and
    its draft row k become -inf where masks[b, k] forbids the id. Two launches of (row, vocabulary
    block) programs; the draft rows are contiguous [B, D, V]."""
    packed, vocab = logits.shape
    lanes, drafts = draft_logits.shape[0], draft_logits.shape[1]
    positions, words = masks.shape[1], masks.shape[2]
    block = min(block, triton.next_power_of_2(vocab))
    blocks = triton.cdiv(vocab, block)
    _target_mask_kernel[(packed, blocks)](logits, masks, lengths, lanes, positions, vocab, words, logits.stride(0),
                                          BLOCK=block)
    if lanes * drafts:
        _draft_mask_kernel[(lanes * drafts, blocks)](draft_logits, masks, drafts, positions, vocab, words,
                                                     BLOCK=block)
