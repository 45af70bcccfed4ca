"""The speculative operators in plain NumPy and Python (host side): the executable definition of
complete speculative generation's allocation, packing, verification and commit.

Every per-lane array is indexed by submission row `b` (see `helios.program.speculative`). A lane is
a submission row with `lane_order[b] >= 0` (allocation) or `lengths[b] > 0` (packing, verification,
commit); the others are padding. A lane's target rows are packed in submission order: lane `b`
occupies rows `[start_b, start_b + lengths[b])` with `start_b` the sum of the earlier lanes'
lengths, and row `k` of it holds `candidates[b, k]` (the pending token, then proposals) at
position `consumed[b] + k`.
"""

from __future__ import annotations

import heapq

import numpy as np

from helios.errors import HeliosError
from helios.program.speculative import ACCEPTANCE_DRAW, TARGET_DRAW
from helios.reference import sampling
from helios.reference.philox import randint, sampling_offset

PROBABILITY_BITS = 32  # P(x) = floor(kept[x] * 2^32 / total): a probability as a 32-bit fixed-point integer


class SpeculativeOverflow(HeliosError):
    """A round's lanes ask for more target rows than the program packs (lengths summing past P)."""


def _words(seed: np.ndarray, consumed: np.ndarray, count: int, draw_index: int) -> np.ndarray:
    """[B, count] uint32: the Philox word of (seed[b], the drawn token's position consumed[b] + k,
    draw index) for k = 1 .. count, as docs/sampling.md (column k - 1 is position consumed[b] + k)."""
    positions = np.asarray(consumed, dtype=np.int64)[:, None] + np.arange(1, count + 1, dtype=np.int64)
    seeds = np.broadcast_to(np.asarray(seed, dtype=np.int64)[:, None], positions.shape)
    return randint(seeds, sampling_offset(positions, draw_index))


def token_probability(logits: np.ndarray, ids: np.ndarray, parameters: np.ndarray, histogram: np.ndarray,
                      grammar_mask: np.ndarray) -> np.ndarray:
    """[B] f32: `kept[ids[b]] / total` of row b under its own filters (docs/sampling.md steps 1-7);
    a greedy row (temperature <= 0) is scored at temperature 1 without rank filters (its draw is a
    point mass, which says nothing of the draft's certainty). 0 for an id outside the row or a row
    whose mask allows nothing."""
    out = np.zeros(logits.shape[0], dtype=np.float32)
    for b in range(logits.shape[0]):
        token = int(ids[b])
        z = sampling.masked_logits(np.asarray(logits[b], dtype=np.float32), parameters[b], histogram[b],
                                   grammar_mask[b])
        if z is None or not 0 <= token < z.shape[0]:
            continue
        if np.float32(parameters[b][sampling.TEMPERATURE]) > 0:
            kept = sampling.row_weights(z, parameters[b])
        else:
            kept = sampling.kept_weights(z, 1.0, 0.0, 1.0, 0.0)
        out[b] = np.float32(np.float64(kept[token]) / np.float64(int(kept.sum())))
    return out


def speculative_allocate(confidence: np.ndarray, ceilings: np.ndarray, lane_order: np.ndarray, *,
                         packed_tokens: int) -> np.ndarray:
    """[B] i32 lengths: every lane starts with its pending position; while rows remain within
    `packed_tokens`, the next row goes to the lane whose immediate frontier has the highest survival
    probability (the product of its FP32 confidences, multiplied in FP64 from 1.0 in draft order),
    among lanes below min(ceiling, D + 1); ties prefer the shorter prefix, then the lower original
    request slot. A frontier is admitted only after its predecessor (later confidence never admits
    one). Confidence is clamped to [0, 1] (NaN reads 0). No random draw is consumed."""
    rows, drafts = confidence.shape
    conf = np.nan_to_num(np.asarray(confidence, dtype=np.float32), nan=0.0)
    conf = np.clip(conf, np.float32(0), np.float32(1))
    lengths = np.zeros(rows, dtype=np.int32)
    heap: list[tuple[float, int, int, int]] = []  # (-survival, length, slot, row): the smallest pops first
    used = 0
    for b in range(rows):
        slot = int(lane_order[b])
        if slot < 0 or int(ceilings[b]) < 1:
            continue
        lengths[b] = 1
        used += 1
        limit = min(int(ceilings[b]), drafts + 1)
        if limit > 1:
            heapq.heappush(heap, (-float(np.float64(conf[b, 0])), 1, slot, b))
    if used > packed_tokens:
        raise SpeculativeOverflow(f"{used} lanes need more than the {packed_tokens} packed rows")
    while heap and used < packed_tokens:
        negative, length, slot, b = heapq.heappop(heap)
        lengths[b] = length + 1
        used += 1
        if length + 1 < min(int(ceilings[b]), drafts + 1):
            survival = np.float64(-negative) * np.float64(conf[b, length])
            heapq.heappush(heap, (-float(survival), length + 1, slot, b))
    return lengths


def _starts(lengths: np.ndarray, packed_tokens: int) -> np.ndarray:
    lengths = np.maximum(np.asarray(lengths, dtype=np.int64), 0)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if lengths.size else lengths
    if lengths.sum() > packed_tokens:
        raise SpeculativeOverflow(f"lanes of {lengths.tolist()} rows pass the {packed_tokens} packed rows")
    return starts


def speculative_pack(lane_order: np.ndarray, lengths: np.ndarray, consumed: np.ndarray, candidates: np.ndarray, *,
                     packed_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """[P] i32 tokens, positions, next positions and lanes of the packed target rows (padding rows:
    token -1, position 0, next position 0, lane -1). A lane packs at most `C` (candidates' width) rows."""
    tokens = np.full(packed_tokens, -1, dtype=np.int32)
    positions = np.zeros(packed_tokens, dtype=np.int32)
    next_positions = np.zeros(packed_tokens, dtype=np.int32)
    token_lane = np.full(packed_tokens, -1, dtype=np.int32)
    width = candidates.shape[1]
    clipped = np.minimum(np.maximum(np.asarray(lengths, dtype=np.int64), 0), width)
    starts = _starts(clipped, packed_tokens)
    for b in range(len(lane_order)):
        n = int(clipped[b])
        if n == 0:
            continue
        rows = slice(int(starts[b]), int(starts[b]) + n)
        tokens[rows] = candidates[b, :n]
        positions[rows] = int(consumed[b]) + np.arange(n)
        next_positions[rows] = positions[rows] + 1
        token_lane[rows] = int(lane_order[b])
    return tokens, positions, next_positions, token_lane


def fixed_probabilities(kept: np.ndarray) -> np.ndarray:
    """Each id's probability `kept / total` as a 32-bit fixed-point integer (floor(kept * 2^32 / total))."""
    total = int(kept.sum())
    if not total:
        return np.zeros_like(kept, dtype=np.int64)
    return (kept.astype(np.int64) << PROBABILITY_BITS) // total  # kept <= 2^24: no overflow


def accepts(p_x: int, q_x: int, word: int) -> bool:
    """The acceptance test of a proposal of fixed-point probabilities P(x) (target) and Q(x) (draft)
    under one uint32 word: min(1, p / q) > word / 2^32, as `P(x) >= Q(x) or word * Q(x) < P(x) * 2^32`
    (exact integers: no division, and no product past 2^64)."""
    return p_x >= q_x or word * q_x < p_x << PROBABILITY_BITS


def speculative_verify(logits: np.ndarray, draft_logits: np.ndarray, candidates: np.ndarray, lengths: np.ndarray,
                       consumed: np.ndarray, seed: np.ndarray, parameters: np.ndarray, histogram: np.ndarray,
                       grammar_mask: np.ndarray, *, verify_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """[B, W] i32 emitted ids (-1 past the emitted ones) and [B] i32 accepted proposals.

    Lane b verifies proposals `candidates[b, 1 : L]` (L = lengths[b]) in order; proposal k was drawn
    from `draft_logits[b, k - 1]` and is judged by the target's row `start_b + k - 1`, both under the
    lane's own filters (docs/sampling.md). Greedy lanes (temperature <= 0) accept while the
    proposal is the target's greedy id and emit that id at the first mismatch. Sampled lanes accept
    proposal x with probability min(1, p(x) / q(x)), in 32-bit fixed point: accept iff P(x) >= Q(x)
    or `word * Q(x) < P(x) * 2^32`, with `word` the ACCEPTANCE_DRAW word of x's position; on
    rejection the lane emits a draw (TARGET_DRAW word) from the residual max(0, P - Q) (from P when
    the residual is empty). After every proposal is accepted, the bonus token is the plain sampler's
    draw from the target's last row (the word plain decoding uses at that position)."""
    rows = candidates.shape[0]
    ids = np.full((rows, verify_tokens), -1, dtype=np.int32)
    accepted = np.zeros(rows, dtype=np.int32)
    starts = _starts(np.maximum(lengths, 0), logits.shape[0])
    acceptance_words = _words(seed, consumed, candidates.shape[1], ACCEPTANCE_DRAW)
    target_words = _words(seed, consumed, candidates.shape[1], TARGET_DRAW)
    for b in range(rows):
        length = int(lengths[b])
        if length <= 0:
            continue
        start, params, counts, mask = int(starts[b]), parameters[b], histogram[b], grammar_mask[b]
        greedy = not np.float32(params[sampling.TEMPERATURE]) > 0
        emitted: list[int] = []
        for k in range(1, length):
            proposal = int(candidates[b, k])  # at position consumed[b] + k: words column k - 1
            z = sampling.masked_logits(np.asarray(logits[start + k - 1], dtype=np.float32), params, counts, mask)
            if z is None:
                emitted.append(sampling.NO_TOKEN)
                break
            if greedy:
                choice = sampling.greedy(z)
                if choice == proposal:
                    emitted.append(proposal)
                    continue
                emitted.append(choice)
                break
            target = fixed_probabilities(sampling.row_weights(z, params))
            q = sampling.masked_logits(np.asarray(draft_logits[b, k - 1], dtype=np.float32), params, counts, mask)
            draft = fixed_probabilities(sampling.row_weights(q, params)) if q is not None else target * 0
            p_x = int(target[proposal]) if 0 <= proposal < target.shape[0] else 0
            q_x = int(draft[proposal]) if 0 <= proposal < draft.shape[0] else 0
            if accepts(p_x, q_x, int(acceptance_words[b, k - 1])):
                emitted.append(proposal)
                continue
            residual = np.maximum(target - draft, 0)
            if not residual.any():
                residual = target
            emitted.append(sampling.draw(residual, int(target_words[b, k - 1])))
            break
        else:  # every proposal accepted: the bonus token, as plain decoding samples it
            row = np.asarray(logits[start + length - 1], dtype=np.float32)
            word = int(target_words[b, length - 1])  # position consumed[b] + length
            emitted.append(sampling.sample_row(row, params, counts, mask, word))
        accepted[b] = len(emitted) - 1
        ids[b, :len(emitted)] = emitted
    return ids, accepted


def copied_run(copied_ids: np.ndarray, copied_count: np.ndarray, width: int) -> np.ndarray:
    """[B] i32: each lane's copied run, the leading `min(copied_count[b], D)` copied ids up to the
    first one outside [0, width)."""
    ids = np.asarray(copied_ids, dtype=np.int64)
    valid = (ids >= 0) & (ids < width)
    leading = np.cumprod(valid, axis=1).sum(axis=1)  # valid ids before the first invalid one
    return np.minimum(np.clip(np.asarray(copied_count, dtype=np.int64), 0, ids.shape[1]), leading).astype(np.int32)


def copied_proposal(drawn: np.ndarray, draft_logits: np.ndarray, copied_ids: np.ndarray, copied_count: np.ndarray,
                    *, index: int) -> tuple[np.ndarray, np.ndarray]:
    """([B] i32, [B, V] f32): proposal `index + 1` of each lane and the logits it is judged as drawn
    from. Within the lane's copied run (`copied_run` > index) the proposal is `copied_ids[b, index]`
    and its row is 0 at that id and -inf elsewhere: the one-hot distribution every sampling filter
    keeps, so verification accepts it with the target's probability of it (greedy: when it is the
    target's greedy id). Past the run: the draft's draw `drawn[b]` and its row, unchanged."""
    copied = copied_run(copied_ids, copied_count, draft_logits.shape[1]) > index
    token = np.where(copied, np.asarray(copied_ids)[:, index], drawn).astype(np.int32)
    logits = np.array(draft_logits, dtype=np.float32, copy=True)
    for b in np.flatnonzero(copied):
        logits[b] = -np.inf
        logits[b, token[b]] = 0.0
    return token, logits


def speculative_grammar_mask(logits: np.ndarray, draft_logits: np.ndarray, masks: np.ndarray,
                             lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """In place: the per-position grammar masks of a speculative round. Lane b's target row
    `start_b + k` (k < min(lengths[b], W), rows packed as `speculative_pack` lays them out, rows at or
    past P skipped) and its draft row `draft_logits[b, k]` (k < min(D, W), every lane) become -inf at
    every id `masks[b, k]` forbids (bit t % 32 of word t // 32): row k judges the token at position
    consumed + k + 1, the one after the pending token and the first k proposals. Other rows and
    allowed ids keep their values, so an all-ones mask changes nothing."""
    rows, width = logits.shape
    lanes, drafts, vocab = draft_logits.shape
    positions = masks.shape[1]
    lengths = np.maximum(np.asarray(lengths, dtype=np.int64), 0)
    start = 0
    for b in range(lanes):
        for k in range(min(int(lengths[b]), positions)):
            if start + k < rows:
                allowed = sampling.allowed_tokens(masks[b, k], width)
                logits[start + k][~allowed] = -np.inf
        start += int(lengths[b])
        for k in range(min(drafts, positions)):
            allowed = sampling.allowed_tokens(masks[b, k], vocab)
            draft_logits[b, k][~allowed] = -np.inf
    return logits, draft_logits


def speculative_commit(ids: np.ndarray, accepted: np.ndarray, lengths: np.ndarray,
                       consumed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[B] i32 each lane's next pending token (its last emitted id), emitted count (accepted + 1) and
    consumed endpoint (consumed + accepted + 1: the pending token and the accepted proposals);
    padding rows (lengths 0): -1, 0, 0."""
    live = np.asarray(lengths) > 0
    rows = np.arange(ids.shape[0])
    last = np.clip(np.asarray(accepted, dtype=np.int64), 0, ids.shape[1] - 1)
    pending = np.where(live, ids[rows, last], -1).astype(np.int32)
    emitted = np.where(live, np.asarray(accepted) + 1, 0).astype(np.int32)
    endpoint = np.where(live, np.asarray(consumed) + emitted, 0).astype(np.int32)
    return pending, emitted, endpoint
