"""The speculative kernels against `helios.reference.speculative` (and `scatter`, `column_write`
against the reference operators) on fresh random inputs, bit for bit: verification of greedy and
sampled lanes in one batch (every length 0..D+1, padding rows, grammar masks, rank filters,
penalties), token probabilities, the allocation's tie rules and FP64 products, packing and commit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helios.production.kernels import gather, speculative
from helios.production.kernels import sampling as sampling_kernels
from helios.program.speculative import PROPOSAL_DRAW
from helios.reference import operators as ref
from helios.reference import sampling
from helios.reference import speculative as spec
from tests.production.helpers import DEVICE, GPU, numpy, tensor
from tests.reference.allocation_oracle import allocation_oracle, quantized_confidences
from tests.reference.speculative_rounds import one_proposal_round

VOCAB, BLOCK = 48, 16  # three vocabulary blocks a row


def _t(array: np.ndarray) -> torch.Tensor:
    array = np.ascontiguousarray(array)
    return tensor(array, torch.float32 if array.dtype == np.float32 else None)


def _i32(n: int, *shape: int) -> torch.Tensor:
    return torch.full((n, *shape), -7, dtype=torch.int32, device=DEVICE)


def sampling_lanes(rng: np.random.Generator, lanes: int, vocab: int, *, empty_mask: bool = True):
    """Per-lane parameters, histograms and grammar masks: greedy and sampled lanes, every rank filter,
    penalties, restricted masks and (`empty_mask`) one lane whose mask allows nothing."""
    parameters = np.zeros((lanes, 7), np.float32)
    parameters[:, 0] = rng.choice([0.0, 0.6, 1.0, 1.5], size=lanes)  # temperature
    parameters[:, 1] = rng.choice([1.0, 0.9, 0.5], size=lanes)  # top_p
    parameters[:, 2] = rng.choice([0, 1, 4, 20, vocab + 5], size=lanes)  # top_k
    parameters[:, 3] = rng.choice([0.0, 0.02, 0.3], size=lanes)  # min_p
    parameters[:, 4] = rng.choice([1.0, 1.3, 0.8], size=lanes)  # repetition
    parameters[:, 5] = rng.choice([0.0, 0.5], size=lanes)  # presence
    parameters[:, 6] = rng.choice([0.0, 0.2], size=lanes)  # frequency
    parameters[0, 0], parameters[1, 0:4] = 0.0, (1.0, 1.0, 0, 0.0)  # one greedy lane, one unfiltered sampled lane
    histogram = rng.integers(0, 3, size=(lanes, vocab - 5)).astype(np.int32)
    words = np.full((lanes, (vocab + 31) // 32), 2**32 - 1, dtype=np.uint64)
    restricted = rng.random(lanes) < 0.4
    words[restricted] = rng.integers(0, 2**32, size=(int(restricted.sum()), words.shape[1]), dtype=np.uint64)
    if empty_mask:
        words[-1] = 0
    return parameters, histogram, words.astype(np.uint32).view(np.int32)


def _starts(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.maximum(lengths, 0))[:-1]]).astype(np.int64)


def verify_round(rng: np.random.Generator, *, lanes: int = 9, drafts: int = 3, vocab: int = VOCAB, padding: int = 2,
                 packed: int | None = None):
    """A random verification round: every length 0..D+1 among the lanes, target rows and draft rows
    of related logits (so proposals are accepted and rejected), sampled lanes' proposals drawn as the
    program draws them (`sample` with draw_index 1 over the draft row), greedy lanes' proposals the
    target's greedy id most of the time; `packed`: P target rows (padding to it), else the lanes'
    rows and `padding` more."""
    parameters, histogram, mask = sampling_lanes(rng, lanes, vocab)
    lengths = rng.integers(0, drafts + 2, size=lanes).astype(np.int32)
    lengths[2:drafts + 4] = rng.permutation(drafts + 2)
    lengths[:2] = drafts + 1  # the greedy lane 0 and the sampled lane 1 judge every proposal
    starts = _starts(lengths)
    packed = int(lengths.sum()) + padding if packed is None else packed
    consumed = rng.integers(0, 3000, size=lanes).astype(np.int32)
    seed = rng.integers(-2**63, 2**63 - 1, size=lanes, dtype=np.int64)
    logits = (rng.standard_normal((packed, vocab)) * 2.5).astype(np.float32)
    logits[rng.random(logits.shape) < 0.02] = np.nan
    draft_logits = (rng.standard_normal((lanes, drafts, vocab)) * 2.5).astype(np.float32)
    candidates = rng.integers(0, vocab, size=(lanes, drafts + 1)).astype(np.int32)
    for b in range(lanes):
        for k in range(1, lengths[b]):
            row = logits[starts[b] + k - 1]
            draft_logits[b, k - 1] = np.nan_to_num(row, nan=0.0) + rng.standard_normal(vocab).astype(np.float32) * \
                rng.choice([0.1, 0.6, 2.0])
            if parameters[b, 0] > 0:
                drawn = ref.sample(draft_logits[b, k - 1][None], seed[b:b + 1], consumed[b:b + 1] + k - 1,
                                   parameters[b:b + 1], histogram[b:b + 1], mask[b:b + 1], draw_index=PROPOSAL_DRAW)
                candidates[b, k] = drawn[0]
            else:
                z = sampling.masked_logits(row, parameters[b], histogram[b], mask[b])
                if z is not None and rng.random() < 0.75:
                    candidates[b, k] = sampling.greedy(z)
    candidates[2, 1] = -1 if lengths[2] > 1 else candidates[2, 1]  # no token (the draft's mask was empty)
    return (logits, draft_logits, candidates, lengths, consumed, seed, parameters, histogram, mask)


def run_verify(inputs, verify_tokens: int, *, block: int = BLOCK):
    logits, draft_logits = inputs[0], inputs[1]
    lanes, drafts, vocab = draft_logits.shape
    histogram, mask = inputs[7], inputs[8]
    # one storage for both sides, as a load makes it: the draft rows' scratch over the target rows'
    verifier = speculative.Verifier(logits.shape[0], lanes, drafts, vocab, histogram.shape[1], mask.shape[1], DEVICE,
                                    block=block, storage=sampling_kernels.SamplerStorage(DEVICE))
    assert verifier.target.z.data_ptr() == verifier.draft.z.data_ptr() != verifier.target.kept.data_ptr()
    ids, accepted = _i32(lanes, verify_tokens), _i32(lanes)
    verifier(*(_t(a) for a in inputs), ids, accepted)
    return numpy(ids), numpy(accepted)


@pytest.mark.parametrize(("drafts", "block"), [(3, BLOCK), (2, 64), (3, 64)])
def test_verify_matches_the_reference(drafts, block):
    """With blocks of 16 ids, block sums, the residual draw's two passes and the plain draw cross blocks."""
    rng = np.random.default_rng()
    inputs = verify_round(rng, lanes=7 + drafts % 2, drafts=drafts)
    expected = spec.speculative_verify(*inputs, verify_tokens=drafts + 1)
    produced = run_verify(inputs, drafts + 1, block=block)
    np.testing.assert_array_equal(produced[0], expected[0])
    np.testing.assert_array_equal(produced[1], expected[1])
    lengths, parameters = inputs[3], inputs[6]
    assert (expected[1][lengths == 0] == 0).all() and (expected[0][lengths == 0] == -1).all()
    assert (expected[0][-1, 0] == -1) or lengths[-1] == 0  # the lane whose mask allows nothing
    assert (parameters[lengths > 1, 0] <= 0).any() and (parameters[lengths > 1, 0] > 0).any()


def test_verify_accepts_rejects_and_emits_bonus_tokens():
    """Each outcome of each lane kind, forced, agreeing with the reference: a greedy lane proposing
    the target's greedy ids (every proposal accepted, then the bonus token), a greedy lane proposing
    another id (the target's id at the first mismatch), a sampled lane whose draft rows are its
    target rows (P = Q: every proposal accepted), a sampled lane proposing an id the target gives
    weight 0 (rejected, then a residual draw)."""
    rng = np.random.default_rng()
    lanes, drafts = 6, 2
    inputs = list(verify_round(rng, lanes=lanes, drafts=drafts, padding=1))
    logits, draft_logits, candidates, lengths, _, _, parameters, histogram, mask = inputs
    lengths[:] = (3, 3, 3, 3, 0, 0)
    logits = (rng.standard_normal((13, VOCAB)) * 2.5).astype(np.float32)
    parameters[:2, 0], parameters[2:4, 0] = 0.0, (1.0, 0.8)
    mask[:] = -1
    starts = _starts(lengths)
    for b in range(4):
        for k in (1, 2):
            row = starts[b] + k - 1
            greedy = sampling.greedy(sampling.masked_logits(logits[row], parameters[b], histogram[b], mask[b]))
            candidates[b, k] = greedy if b == 0 else (greedy + 1) % VOCAB
    draft_logits[2] = logits[starts[2]:starts[2] + 2]
    candidates[2, 1:] = rng.integers(0, VOCAB, size=2)
    x = int(candidates[3, 1])
    logits[starts[3], x], draft_logits[3, 0, x] = -40.0, 40.0
    histogram[3, x % histogram.shape[1]] = 0  # no penalty lifts it
    inputs[0:4] = logits, draft_logits, candidates, lengths
    ids, accepted = spec.speculative_verify(*inputs, verify_tokens=drafts + 1)
    produced = run_verify(inputs, drafts + 1, block=64)
    np.testing.assert_array_equal(produced[0], ids)
    np.testing.assert_array_equal(produced[1], accepted)
    np.testing.assert_array_equal(accepted, [2, 0, 2, 0, 0, 0])
    assert ids[1, 0] == (candidates[1, 1] - 1) % VOCAB and ids[3, 0] != x and ids[4, 0] == -1


def test_token_probability_matches_the_reference():
    rng = np.random.default_rng()
    rows = 12
    parameters, histogram, mask = sampling_lanes(rng, rows, VOCAB)
    logits = (rng.standard_normal((rows, VOCAB)) * 3).astype(np.float32)
    logits[3, :4] = logits[3].max() + 1  # ties at the top
    parameters[0, 0] = 0.0  # a greedy row, scored at temperature 1 without rank filters
    ids = rng.integers(0, VOCAB, size=rows).astype(np.int32)
    for b in range(rows - 1):  # mostly a surviving id
        z = sampling.masked_logits(logits[b], parameters[b], histogram[b], mask[b])
        if z is not None and (b == 0 or rng.random() < 0.7):
            ids[b] = sampling.greedy(z)
    ids[4], ids[5] = -1, VOCAB + 2  # outside the row
    expected = spec.token_probability(logits, ids, parameters, histogram, mask)
    scorer = speculative.ProbabilityScorer(rows, VOCAB, DEVICE, block=BLOCK)
    out = torch.zeros(rows, dtype=torch.float32, device=DEVICE)
    scorer(_t(logits), _t(ids), _t(parameters), _t(histogram), _t(mask), out)
    # bit for bit where Triton interprets (NumPy's arithmetic). Compiled, a scaled logit or its exp may
    # round an ulp apart: a kept weight floor(exp(z - max) 2^24) then moves by its floor's unit (an
    # absolute 2^-24 of a probability at most; 1.8e-5 of a probability of 0.0017 seen on an H100) or,
    # through a logit near 20, by 2e-6 of itself
    tolerance = dict(rtol=1e-5, atol=4 * 2.0**-sampling.WEIGHT_BITS) if GPU else dict(rtol=0, atol=0)
    np.testing.assert_allclose(numpy(out), expected, **tolerance)
    assert expected[-1] == 0 and expected[4] == expected[5] == 0
    assert (expected[(parameters[:, 0] <= 0)] > 0).any() and (expected > 0).sum() >= 3


def _allocate(confidence, ceilings, lane_order, packed):
    out = _i32(len(ceilings))
    speculative.Allocator(packed, DEVICE)(_t(confidence), _t(ceilings), _t(lane_order), out)
    return numpy(out)


@pytest.mark.parametrize(("lanes", "drafts"), [(1, 3), (3, 2), (4, 4), (5, 3)])
def test_allocate_matches_the_reference_and_the_oracle_on_quantized_confidences(lanes, drafts):
    """A thousand rounds in one launch (`allocate_rounds`) of few distinct confidence values, so exact
    ties of survival (and of whole products) are common; NaN and values outside [0, 1] among them;
    padding rows; ceilings and P both binding."""
    rng = np.random.default_rng()
    rounds = 1000
    confidence = np.stack([quantized_confidences(rng, lanes, drafts) for _ in range(rounds)])
    ceilings = rng.integers(0, drafts + 3, size=(rounds, lanes)).astype(np.int32)
    lane_order = np.stack([rng.permutation(lanes + 3)[:lanes] for _ in range(rounds)]).astype(np.int32)
    lane_order[rng.random((rounds, lanes)) < 0.2] = -1
    packed = rng.integers(lanes, lanes * (drafts + 1) + 2, size=rounds).astype(np.int32)
    out = _i32(rounds, lanes)
    speculative.allocate_rounds(_t(confidence), _t(ceilings), _t(lane_order), _t(packed), out,
                                steps=int(packed.max()), rounds_block=rounds)
    produced = numpy(out)
    for g in range(rounds):
        expected = spec.speculative_allocate(confidence[g], ceilings[g], lane_order[g], packed_tokens=int(packed[g]))
        np.testing.assert_array_equal(produced[g], expected, err_msg=f"round {g}")
        if g < 300:
            np.testing.assert_array_equal(allocation_oracle(confidence[g], ceilings[g], lane_order[g], int(packed[g])),
                                          expected, err_msg=f"round {g}")
    limits = np.where((lane_order >= 0) & (ceilings >= 1), np.minimum(ceilings, drafts + 1), 0)
    assert ((produced.sum(1) == packed) & (produced < limits).any(1)).sum() > 50  # P binds
    assert ((produced == limits) & (limits > 0) & (limits < drafts + 1)).any(1).sum() > 50  # ceilings bind


def test_allocate_exact_ties_prefer_the_shorter_prefix_then_the_lower_slot():
    confidence = np.array([[1.0, 0.5, 0.5], [0.5, 0.5, 0.5]], np.float32)
    ceilings = np.array([4, 4], np.int32)
    lane_order = np.array([0, 1], np.int32)
    # rows 1, 2 pending; row 3 to lane 0 (survival 1); then lane 0's 0.5 at prefix 2 ties lane 1's 0.5
    # at prefix 1: the shorter prefix (lane 1) wins although lane 0 has the lower slot
    for packed, expected in ((3, [2, 1]), (4, [2, 2]), (5, [3, 2])):
        np.testing.assert_array_equal(spec.speculative_allocate(confidence, ceilings, lane_order,
                                                                packed_tokens=packed), expected)
        np.testing.assert_array_equal(_allocate(confidence, ceilings, lane_order, packed), expected)
    same = np.full((3, 2), 0.75, np.float32)  # identical lanes: the lower slot, whatever the row
    order = np.array([7, 2, 5], np.int32)
    for packed, expected in ((4, [1, 2, 1]), (5, [1, 2, 2]), (6, [2, 2, 2]), (7, [2, 3, 2])):
        np.testing.assert_array_equal(spec.speculative_allocate(same, np.full(3, 3, np.int32), order,
                                                                packed_tokens=packed), expected)
        np.testing.assert_array_equal(_allocate(same, np.full(3, 3, np.int32), order, packed), expected)


def _products(c: np.ndarray, dtype) -> list:
    """Each lane's survival after all its confidences, multiplied in `dtype` from 1 in draft order."""
    out = []
    for lane in c:
        s = dtype(1)
        for x in lane:
            s = dtype(s * dtype(x))
        out.append(s)
    return out


def _fp32_fp64_disagreement(rng: np.random.Generator) -> np.ndarray:
    """Two lanes' confidences [c0, c1, c2] whose three-step survivals order one way in FP32 and the
    other way in FP64 (a two-factor FP32 product is the rounded exact one, so it can only tie, not
    reverse: three factors are needed). c0, c1 near 1 and c2 near 0.5: both lanes' two-step
    survivals come before either three-step one."""
    while True:
        c = rng.uniform(0.8, 1.0, size=(2, 3)).astype(np.float32)
        c[0, 2] = rng.uniform(0.4, 0.6)
        c[1, 2] = np.float32(_products(c[:1], np.float64)[0] / (np.float64(c[1, 0]) * np.float64(c[1, 1])))
        f32, f64 = _products(c, np.float32), _products(c, np.float64)
        if f32[0] != f32[1] and f64[0] != f64[1] and (f32[0] < f32[1]) != (f64[0] < f64[1]):
            return c


def test_allocate_orders_survivals_by_fp64_products():
    rng = np.random.default_rng()
    for _ in range(5):
        confidence = _fp32_fp64_disagreement(rng)
        winner = int(np.argmax(_products(confidence, np.float64)))
        expected = [3, 3]
        expected[winner] = 4  # rows: two pending, four proposals, the seventh by FP64 survival
        for lane_order in (np.array([0, 1], np.int32), np.array([1, 0], np.int32)):
            args = (confidence, np.array([4, 4], np.int32), lane_order)
            np.testing.assert_array_equal(spec.speculative_allocate(*args, packed_tokens=7), expected)
            np.testing.assert_array_equal(_allocate(*args, 7), expected)


def test_allocate_ceilings_and_p_bind():
    confidence = np.array([[0.9, 0.9, 0.9], [0.2, 0.1, 0.1], [1.0, 1.0, 1.0], [np.nan, 2.0, 1.0]], np.float32)
    lane_order = np.array([3, 0, 2, 1], np.int32)
    ceilings = np.array([2, 9, 3, 4], np.int32)  # lane 0 stops at 2 rows, lane 2 at 3; D + 1 = 4 caps lane 1
    # frontier order: lane 2's 1.0, 1.0; lane 0's 0.9; lane 1's 0.2, 0.02, 0.002; lane 3's 0, 0, 0 (NaN reads 0)
    cases = ((4, [1, 1, 1, 1]), (6, [1, 1, 3, 1]), (7, [2, 1, 3, 1]), (9, [2, 3, 3, 1]), (11, [2, 4, 3, 2]),
             (30, [2, 4, 3, 4]))
    for packed, expected in cases:
        np.testing.assert_array_equal(spec.speculative_allocate(confidence, ceilings, lane_order,
                                                                packed_tokens=packed), expected)
        np.testing.assert_array_equal(_allocate(confidence, ceilings, lane_order, packed), expected)


def test_pack_matches_the_reference():
    rng = np.random.default_rng()
    for _ in range(5):
        lanes, width = 7, 4
        lengths = rng.integers(-1, width + 3, size=lanes).astype(np.int32)  # beyond C: clipped to C
        packed = int(np.clip(lengths, 0, width).sum()) + int(rng.integers(0, 4))
        lane_order = rng.permutation(lanes).astype(np.int32)
        consumed = rng.integers(0, 500, size=lanes).astype(np.int32)
        candidates = rng.integers(0, 1000, size=(lanes, width)).astype(np.int32)
        expected = spec.speculative_pack(lane_order, lengths, consumed, candidates, packed_tokens=packed)
        outs = [_i32(packed) for _ in range(4)]
        speculative.speculative_pack(_t(lane_order), _t(lengths), _t(consumed), _t(candidates), *outs, block=4)
        for out, want in zip(outs, expected, strict=True):
            np.testing.assert_array_equal(numpy(out), want)


def test_commit_matches_the_reference():
    rng = np.random.default_rng()
    lanes, width = 9, 4
    ids = rng.integers(-1, 100, size=(lanes, width)).astype(np.int32)
    accepted = rng.integers(0, width, size=lanes).astype(np.int32)
    lengths = rng.integers(0, width + 1, size=lanes).astype(np.int32)
    lengths[:2] = 0
    consumed = rng.integers(0, 500, size=lanes).astype(np.int32)
    expected = spec.speculative_commit(ids, accepted, lengths, consumed)
    outs = [_i32(lanes) for _ in range(3)]
    speculative.speculative_commit(_t(ids), _t(accepted), _t(lengths), _t(consumed), *outs, block=4)
    for out, want in zip(outs, expected, strict=True):
        np.testing.assert_array_equal(numpy(out), want)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_scatter_skips_rows_outside_and_keeps_the_others(dtype):
    rng = np.random.default_rng()
    rows, n = 6, 5
    out = rng.integers(-50, 50, size=(rows, 3, 2)).astype(dtype)
    x = rng.integers(-50, 50, size=(n, 3, 2)).astype(dtype)
    index = np.array([4, -1, 0, rows, 2], np.int32)
    expected = ref.scatter(out.copy(), x, index)
    produced = _t(out)
    gather.scatter(produced, _t(x), _t(index), block=4)
    np.testing.assert_array_equal(numpy(produced), expected)
    assert (expected[[1, 3, 5]] == out[[1, 3, 5]]).all()


def test_verify_emits_the_reference_tokens_of_the_losslessness_round():
    """The losslessness round of the reference (tests/reference/test_speculative_losslessness.py),
    fewer seeds: the kernels emit the very same tokens, so its distribution is theirs."""
    inputs = one_proposal_round(32, first_seed=5)
    ids, accepted = spec.speculative_verify(*inputs, verify_tokens=2)
    produced = run_verify(inputs, 2, block=8)
    np.testing.assert_array_equal(produced[0], ids)
    np.testing.assert_array_equal(produced[1], accepted)
    assert 0 < accepted.sum() < len(accepted)


@pytest.mark.parametrize("index", [0, 2])
def test_copied_proposal_matches_the_reference(index):
    """Copied runs of every length (counts above D and below 0, ids outside the row cutting a run),
    several vocabulary blocks a row: the token and the row, bit for bit."""
    rng = np.random.default_rng()
    lanes, drafts = 9, 3
    copied = rng.integers(0, VOCAB, size=(lanes, drafts)).astype(np.int32)
    copied[rng.random((lanes, drafts)) < 0.2] = rng.choice([-1, VOCAB, VOCAB + 3])
    count = rng.integers(-1, drafts + 3, size=lanes).astype(np.int32)
    drawn = rng.integers(0, VOCAB, size=lanes).astype(np.int32)
    rows = rng.standard_normal((lanes, VOCAB)).astype(np.float32)
    token, logits = spec.copied_proposal(drawn, rows, copied, count, index=index)
    out_token, out_logits = _i32(lanes), torch.full((lanes, VOCAB), 7.0, device=DEVICE)
    speculative.copied_proposal(_t(drawn), _t(rows), _t(copied), _t(count), out_token, out_logits, index=index,
                                block=BLOCK)
    assert numpy(out_token).tolist() == token.tolist()
    np.testing.assert_array_equal(numpy(out_logits), logits)


def test_speculative_grammar_mask_matches_the_reference():
    """Per-position grammar masks over packed target rows and draft rows: lanes of every length 0..W
    (and one past W), padding rows past the lanes, masks of random words, an all-ones mask (nothing
    changes) and an all-zero one, several vocabulary blocks a row: the rows, bit for bit."""
    rng = np.random.default_rng()
    lanes, drafts, width, words = 6, 3, 4, (VOCAB + 31) // 32
    lengths = np.array([4, 0, 1, 2, 5, 3], np.int32)
    packed = int(lengths.sum()) + 2
    masks = rng.integers(0, 2**32, size=(lanes, width, words), dtype=np.uint64).astype(np.uint32).view(np.int32)
    masks[0, 1], masks[3, 0] = -1, 0
    logits = rng.standard_normal((packed, VOCAB)).astype(np.float32)
    draft_logits = rng.standard_normal((lanes, drafts, VOCAB)).astype(np.float32)
    expected_logits, expected_draft = spec.speculative_grammar_mask(logits.copy(), draft_logits.copy(), masks, lengths)
    assert np.isneginf(expected_logits).any() and not np.isneginf(expected_logits[-2:]).any()
    np.testing.assert_array_equal(expected_logits[1], logits[1])  # lane 0's row 1: all ones
    assert np.isneginf(expected_logits[5]).all()  # lane 3's row 0: nothing allowed
    out_logits, out_draft = _t(logits), _t(draft_logits)
    speculative.speculative_grammar_mask(out_logits, out_draft, _t(masks), _t(lengths), block=BLOCK)
    np.testing.assert_array_equal(numpy(out_logits), expected_logits)
    np.testing.assert_array_equal(numpy(out_draft), expected_draft)
