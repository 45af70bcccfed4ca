"""Sampling (device side): `sample` (docs/sampling.md) and `argmax`.

`Sampler` owns the static buffers of one (rows, vocab) shape and runs three stages, each a pure
function of the previous one, so the result equals `helios.reference.sampling.sample` bit for bit
wherever `exp` agrees:

  1. `_filter_kernel` and `_weights_kernel` (Triton, one program per row and block of `BLOCK` ids, so
     a row of a 150k vocabulary spreads over the GPU): penalties from the prompt histogram
     (repetition, then frequency, then presence), the grammar mask, per-block maxima, then the row's
     greedy id (lowest id of the maximum), temperature, the fixed-point weights `floor(e * 2^24)` with
     `e = exp(z - max)` (exactly 1 at the maximum) and `e` itself for min-p;
  2. the rank-dependent filters (top-k, top-p, min-p) in rank order `(z descending, id ascending)`,
     cumulative weights in int64 and the top-p threshold as one float64 product. Where the vocabulary
     fits one program's registers (at most FUSED_RANK_VOCAB ids), `_rank_kernel` does all of it in
     one launch a round and sorts nothing: one program a row finds each cutoff (the k-th key, the
     key where the cumulative weight reaches p) by bisection over the row held in registers, splits
     the ids tied at a cutoff by id order, stores the kept weights in id order and sums them by
     block. Larger vocabularies take the chunked form, two launches and no sort either:
     `_chunk_rank_kernel`, one program per row and chunk of RANK_CHUNK ids, keeps each chunk's first
     min(top-k, RANK_CANDIDATES) ids in rank order (RANK_CANDIDATES without a top-k) as candidates
     and finishes rows that filter by min-p alone; `_merge_rank_kernel`, one program a row, decides
     top-k up to RANK_CANDIDATES, and top-p wherever the row's first RANK_CANDIDATES ids reach its
     threshold, over the candidates exactly as the fused kernel does over a row (the row's leading
     ids are all among them, and the ids a chunk left out rank after them); any other row (a larger
     top-k, a flat row's top-p) is streamed, each cutoff found 4 bits at a time by a pass counting or
     summing over the row for 16 keys at once (correct, but milliseconds for a flat row: a round
     with a lane that could need it, `needs_sort`, takes the sort form instead). The sort form
     (`Sampler(rank_form="sort")`, and beside every chunked sampler) is one stable descending torch
     sort over static buffers and the filters as torch operations (about thirty launches). A round
     none of whose sampling lanes filters by rank
     (`SamplingParams.rank_filtered`) skips this stage (`RankFilters`): with top-k 0, top-p 1 and
     min-p 0 the stage only drops ids of weight 0, which no draw can pick, so the kept weights are
     the weights and the draw is the same;
  3. `_block_sum_kernel` (the weights kernel itself when the rank stage is skipped) and `_draw_kernel`
     (Triton): per-block kept weights, then the Philox word
     `tl.randint(seed, ((position + 1) << 32) | draw_index)`, `target = (word * total) >> 32`
     (computed without overflow from the two 32-bit halves of the total) and the first id, in id
     order, whose cumulative kept weight exceeds the target (found in the one block where the running
     sum crosses it); the greedy id when temperature <= 0; -1 when the mask allows nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import triton
import triton.language as tl

from helios.production.kernels.launch import dependent, wait_for_prior

WEIGHT_SCALE = float(2**24)
# The largest vocabulary whose rows `_rank_kernel` holds in one program's registers: 8,192 ids over
# 16 warps are 16 a thread; a larger one takes the chunked form (module docstring, stage 2).
FUSED_RANK_VOCAB = 8192
# The chunked rank stage (module docstring, stage 2): ids a program of its first launch, candidates
# each keeps (a row's top-k up to this many is decided over them), ids a pass of a streamed row.
RANK_CHUNK = 8192
RANK_CANDIDATES = 256
RANK_SPAN = 1024
RANK_FORMS = ("fused", "chunked", "sort")
# Rows the torch sort's rank stage takes at a time: its [rows, V] buffers (37 bytes an id a row, and
# the temporaries of its comparisons) hold this many rows, and a sampler of more rows (a verifier's
# P = B (W + 1)) sorts them in groups. At least a decode graph's largest batch, so decode rounds sort
# in one group; each group of a 151,936-id vocabulary is large enough to fill the GPU.
SORT_ROWS = 256


class RankFilters:
    """Which rank stage (2 above) the samplers of a device run: one switch per device, read when a
    sampler launches, set by the executor for each round. `form`: "own" (the sampler's rank form),
    "off" (no rank stage: a round without rank-filtered lanes) or "sort" (the torch sort: a round with
    a lane whose filters the chunked form would stream, `needs_sort`). On a GPU each sampling graph is
    captured in each form the device's samplers have ("sort" only where one is chunked: `sorts`)."""

    __slots__ = ("form", "sorts")

    def __init__(self) -> None:
        self.form = "own"
        self.sorts = False  # a sampler of this device has the chunked form (and the sort beside it)


def needs_sort(temperature: float, top_k: int, top_p: float) -> bool:
    """Whether a draw's filters could make the chunked form (vocabularies past FUSED_RANK_VOCAB) stream
    its row: a top-k past RANK_CANDIDATES (one at least the vocabulary, which disables top-k, is
    counted too: the host does not look the vocabulary up), or top-p without a top-k (decided over the
    candidates only where a row's leading ids reach the threshold, which the host cannot know). A
    round with such a lane runs the torch sort instead: a flat row streamed costs milliseconds
    (BENCHMARKS.md). Min-p alone and top-k up to RANK_CANDIDATES never stream."""
    return temperature > 0.0 and (top_k > RANK_CANDIDATES or (top_k <= 0 and top_p < 1.0))


@triton.jit
def _filter_kernel(logits_ptr, params_ptr, hist_ptr, mask_ptr, z_ptr, block_max_ptr, block_id_ptr,
                   vocab, hist_width, mask_words, blocks, BLOCK: tl.constexpr, PDL: tl.constexpr):
    wait_for_prior(PDL)
    # program (row, block): penalties and the grammar mask over one block of ids, and the block's
    # maximum and lowest id of it
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    repetition = tl.load(params_ptr + row * 7 + 4)
    presence = tl.load(params_ptr + row * 7 + 5)
    frequency = tl.load(params_ptr + row * 7 + 6)
    ids = block * BLOCK + tl.arange(0, BLOCK)
    inside = ids < vocab
    z = tl.load(logits_ptr + row * vocab + ids, mask=inside, other=float("-inf"))
    z = tl.where(z != z, float("-inf"), z)
    counts = tl.load(hist_ptr + row * hist_width + ids, mask=inside & (ids < hist_width), other=0)
    seen = counts > 0
    z = tl.where(seen, tl.where(z > 0, z / repetition, z * repetition), z)
    z = z - frequency * counts.to(tl.float32)
    z = z - presence * seen.to(tl.float32)
    word = tl.load(mask_ptr + row * mask_words + ids // 32, mask=inside, other=0)
    allowed = ((word >> (ids % 32)) & 1) != 0
    z = tl.where(allowed & inside, z, float("-inf"))
    tl.store(z_ptr + row * vocab + ids, z, mask=inside)
    best = tl.max(z, axis=0)
    best_id = tl.min(tl.where((z == best) & inside, ids, vocab), axis=0)
    tl.store(block_max_ptr + row * blocks + block, best)
    tl.store(block_id_ptr + row * blocks + block, tl.where(best > float("-inf"), best_id, vocab))


@triton.jit
def _weights_kernel(params_ptr, z_ptr, e_ptr, w_ptr, block_max_ptr, block_id_ptr, greedy_ptr, block_sum_ptr,
                    vocab, blocks, BLOCK: tl.constexpr, BLOCKS: tl.constexpr, RANK_STAGE: tl.constexpr,
                    PDL: tl.constexpr):
    wait_for_prior(PDL)
    # program (row, block): the row's maximum and greedy id from the block maxima, then temperature,
    # e = exp(z - max) (exactly 1 at the maximum) and the fixed-point weights over one block; without
    # the rank stage the weights are the kept weights, so the block's sum is stored here and z and e,
    # which only the rank stage reads, are not
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    b = tl.arange(0, BLOCKS)
    maxima = tl.load(block_max_ptr + row * blocks + b, mask=b < blocks, other=float("-inf"))
    best = tl.max(maxima, axis=0)
    greedy = tl.min(tl.where(maxima == best, tl.load(block_id_ptr + row * blocks + b, mask=b < blocks,
                                                         other=vocab), vocab), axis=0)
    greedy = tl.where(best > float("-inf"), greedy, -1)
    if block == 0:
        tl.store(greedy_ptr + row, greedy)
    temperature = tl.load(params_ptr + row * 7 + 0)
    safe_temperature = tl.where(temperature > 0, temperature, 1.0)
    top = best / safe_temperature
    ids = block * BLOCK + tl.arange(0, BLOCK)
    inside = ids < vocab
    z = tl.load(z_ptr + row * vocab + ids, mask=inside, other=float("-inf")) / safe_temperature
    e = tl.where(z == top, 1.0, tl.exp(z - top))
    e = tl.where(z > float("-inf"), e, 0.0)
    weight = tl.floor(e * 16777216.0).to(tl.int64)
    tl.store(w_ptr + row * vocab + ids, weight, mask=inside)
    if RANK_STAGE:
        tl.store(z_ptr + row * vocab + ids, z, mask=inside)
        tl.store(e_ptr + row * vocab + ids, e, mask=inside)
    else:
        tl.store(block_sum_ptr + row * blocks + block, tl.sum(tl.where(inside, weight, 0), axis=0))


@triton.jit
def _block_sum_kernel(kept_ptr, block_sum_ptr, vocab, blocks, BLOCK: tl.constexpr, PDL: tl.constexpr):
    wait_for_prior(PDL)
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    ids = block * BLOCK + tl.arange(0, BLOCK)
    kept = tl.load(kept_ptr + row * vocab + ids, mask=ids < vocab, other=0)
    tl.store(block_sum_ptr + row * blocks + block, tl.sum(kept, axis=0))


@triton.jit
def _order_key(z):
    # an order-preserving integer of each float (negative floats' magnitude bits flipped; -0.0 read
    # as 0.0, equal to it as the reference compares): rank order is key descending, then id ascending
    bits = z.to(tl.int32, bitcast=True)
    bits = tl.where(bits == -2147483648, 0, bits)
    return (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(tl.int64)


@triton.jit
def _leading(key, live, count, search):
    # the first `count` live ids in rank order (key descending, then id ascending): those above `cut`,
    # the greatest key with `count` live ids at or above it, and of the ids at it the lowest ids that
    # fill the count (a cumulative sum over the tie). Without `search` every live id (the initial cut
    # is below every key)
    cut = tl.full((), -2147483648, tl.int64)
    high = tl.full((), 2147483647, tl.int64)
    for _ in range(0, tl.where(search, 32, 0)):
        middle = (cut + high + 1) >> 1
        enough = tl.sum((live & (key >= middle)).to(tl.int32), axis=0) >= count
        cut = tl.where(enough, middle, cut)
        high = tl.where(enough, high, middle - 1)
    above = live & (key > cut)
    tie = (live & (key == cut)).to(tl.int32)
    room = count - tl.sum(above.to(tl.int64), axis=0)
    return above | ((tie > 0) & (tl.cumsum(tie, axis=0) - tie < room))


@triton.jit
def _within_top_p(key, ordered, threshold, search):
    # top-p over `ordered` (the weights still in): an id stays while the weight ranked before it is
    # below `threshold`. `cut`, the least key with less than that above it: every id above it stays
    # (what precedes it is above `cut` too), none below it does, and at it the weight before an id is
    # that above plus its tie's lower ids'. Without `search` (p >= 1) every id stays (weights below
    # the total are all above the initial cut; ids past it weigh 0); with p = 0 no key qualifies and
    # none stays (the caller keeps rank 0)
    cut = tl.full((), -2147483648, tl.int64)
    high = tl.full((), 2147483648, tl.int64)
    for _ in range(0, tl.where(search, 33, 0)):
        middle = (cut + high) >> 1
        below = tl.sum(tl.where(key > middle, ordered, 0), axis=0).to(tl.float64) < threshold
        high = tl.where(below, middle, high)
        cut = tl.where(below, cut, middle + 1)
    tied = tl.where(key == cut, ordered, 0)
    before = tl.sum(tl.where(key > cut, ordered, 0), axis=0) + tl.cumsum(tied, axis=0) - tied
    return (key > cut) | ((key == cut) & (before.to(tl.float64) < threshold))


@triton.jit
def _rank_kernel(params_ptr, z_ptr, e_ptr, w_ptr, kept_ptr, block_sum_ptr, vocab, blocks, BLOCK: tl.constexpr,
                 BLOCKS: tl.constexpr, WIDTH: tl.constexpr, PDL: tl.constexpr):
    wait_for_prior(PDL)
    # program (row): the rank stage without a sort. Each id's tempered z as an order-preserving
    # integer `key` (negative floats' magnitude bits flipped; -0.0 read as 0.0, equal to it as the
    # reference compares), so rank order is key descending, then id ascending. Each cutoff is a key
    # found by bisection over the 2^32 keys (a count or a weight sum over the row a step): ids above
    # it are all on one side, ids at it are split by id order (a cumulative sum over the tie).
    row = tl.program_id(0).to(tl.int64)
    ids = tl.arange(0, WIDTH)
    real = ids < vocab
    at = row * vocab + ids
    z = tl.load(z_ptr + at, mask=real, other=float("-inf"))
    weight = tl.load(w_ptr + at, mask=real, other=0)
    e = tl.load(e_ptr + at, mask=real, other=0.0)
    key = _order_key(z)
    live = real & (z > float("-inf"))
    top = tl.max(tl.where(real, key, -4294967296), axis=0)
    first = ids == tl.min(tl.where(real & (key == top), ids, WIDTH), axis=0)  # rank 0
    # top-k (every live id without one), then top-p over the survivors' weights, p * their total
    top_k = tl.load(params_ptr + row * 7 + 2).to(tl.int64)  # truncated, as the reference's int()
    survivors = _leading(key, live, top_k, (top_k > 0) & (top_k < vocab))
    ordered = tl.where(survivors, weight, 0)
    top_p = tl.load(params_ptr + row * 7 + 1)
    threshold = top_p.to(tl.float64) * tl.sum(ordered, axis=0).to(tl.float64)
    survivors &= _within_top_p(key, ordered, threshold, top_p < 1.0) | first
    survivors &= (e >= tl.load(params_ptr + row * 7 + 3)) | first  # min-p
    kept = tl.where(survivors, weight, 0)
    tl.store(kept_ptr + at, kept, mask=real)
    b = tl.arange(0, BLOCKS)
    block = tl.where(real, ids // BLOCK, BLOCKS)
    sums = tl.sum(tl.where(block[:, None] == b[None, :], kept[:, None], 0), axis=0)
    tl.store(block_sum_ptr + row * blocks + b, sums, mask=b < blocks)


@triton.jit
def _chunk_rank_kernel(params_ptr, z_ptr, e_ptr, w_ptr, block_max_ptr, kept_ptr, block_sum_ptr, count_ptr,
                       candidate_ptr, total_ptr, vocab, blocks, chunks, BLOCK: tl.constexpr, BLOCKS: tl.constexpr,
                       CHUNK: tl.constexpr, CANDIDATES: tl.constexpr, PDL: tl.constexpr):
    wait_for_prior(PDL)
    # program (row, chunk of CHUNK ids), the first of the chunked rank stage's two launches. A row
    # that filters by top-k or top-p: the chunk's first `count` ids in rank order (count = top-k up
    # to CANDIDATES, else CANDIDATES) are its candidates, stored in id order, and its kept weights
    # and block sums are zeroed for `_merge_rank_kernel`. Any other row (min-p or nothing): its kept
    # weights and block sums are final here (survivors: e >= min-p, and rank 0).
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    ids = chunk * CHUNK + tl.arange(0, CHUNK)
    real = ids < vocab
    at = row * vocab + ids
    z = tl.load(z_ptr + at, mask=real, other=float("-inf"))
    weight = tl.load(w_ptr + at, mask=real, other=0)
    key = _order_key(z)
    live = real & (z > float("-inf"))
    top_k = tl.load(params_ptr + row * 7 + 2).to(tl.int64)  # truncated, as the reference's int()
    top_p = tl.load(params_ptr + row * 7 + 1)
    by_k = (top_k > 0) & (top_k < vocab)
    ranked = by_k | (top_p < 1.0)
    count = tl.where(by_k & (top_k < CANDIDATES), top_k, CANDIDATES)
    ranked_ids = (tl.zeros_like(ids) + ranked.to(tl.int32)) > 0  # (a scalar bool, for every id)
    chosen = _leading(key, live, count, ranked) & ranked_ids
    slot = tl.cumsum(chosen.to(tl.int32), axis=0) - 1
    cell = row * chunks + chunk
    tl.store(candidate_ptr + cell * CANDIDATES + slot, ids, mask=chosen)
    tl.store(count_ptr + cell, tl.sum(chosen.to(tl.int32), axis=0))
    tl.store(total_ptr + cell, tl.sum(weight, axis=0))
    # rank 0: the lowest id of the tempered maximum, in the first block whose maximum it is
    b = tl.arange(0, BLOCKS)
    maxima = tl.load(block_max_ptr + row * blocks + b, mask=b < blocks, other=float("-inf"))
    temperature = tl.load(params_ptr + row * 7 + 0)
    safe_temperature = tl.where(temperature > 0, temperature, 1.0)
    top = tl.max(maxima, axis=0) / safe_temperature
    first_block = tl.min(tl.where((maxima / safe_temperature == top) & (b < blocks), b, BLOCKS), axis=0)
    first = ids == tl.min(tl.where(real & (z == top) & (ids // BLOCK == first_block), ids, vocab), axis=0)
    e = tl.load(e_ptr + at, mask=real, other=0.0)
    min_p = tl.load(params_ptr + row * 7 + 3)
    kept = tl.where(~ranked_ids & ((e >= min_p) | first), weight, 0)
    tl.store(kept_ptr + at, kept, mask=real)
    c = tl.arange(0, CHUNK // BLOCK)
    sums = tl.sum(tl.reshape(kept, (CHUNK // BLOCK, BLOCK)), axis=1)
    tl.store(block_sum_ptr + row * blocks + chunk * (CHUNK // BLOCK) + c, sums,
             mask=chunk * (CHUNK // BLOCK) + c < blocks)


@triton.jit
def _stream_ordered(z_ptr, w_ptr, row, ids, vocab, cut_k, room, ties_before, by_k):
    # one span of ids, streamed in id order: their keys, which survive top-k (above its cutoff, or
    # at it within the first `room` tied ids, `ties_before` of them before the span; every live id
    # without a top-k), their weights where they do ("ordered"), and the span's ids tied at the cutoff
    real = ids < vocab
    z = tl.load(z_ptr + row * vocab + ids, mask=real, other=float("-inf"))
    key = _order_key(z)
    live = real & (z > float("-inf"))
    tie = (live & (key == cut_k)).to(tl.int64)
    chosen = live & ((key > cut_k) | ((tie > 0) & (ties_before + tl.cumsum(tie, axis=0) - tie < room)))
    chosen = tl.where(by_k, chosen, live)
    weight = tl.load(w_ptr + row * vocab + ids, mask=real, other=0)
    return key, chosen, tl.where(chosen, weight, 0), tl.sum(tie, axis=0)


@triton.jit
def _merge_rank_kernel(params_ptr, z_ptr, e_ptr, w_ptr, kept_ptr, block_sum_ptr, count_ptr, candidate_ptr,
                       total_ptr, vocab, blocks, chunks, BLOCK: tl.constexpr, CHUNKS: tl.constexpr,
                       CANDIDATES: tl.constexpr, SPAN: tl.constexpr, PDL: tl.constexpr):
    wait_for_prior(PDL)
    # program (row), the second launch: a row that filters by top-k or top-p. Its candidates hold
    # the row's first min(top-k, CANDIDATES) ids in rank order (each chunk's first that many), so
    # top-k up to CANDIDATES, and top-p where the first CANDIDATES ids reach the threshold, are
    # decided over them exactly as `_rank_kernel` decides over a whole row (bisection; ties by id).
    # Otherwise (top-k past CANDIDATES, or top-p whose cutoff ranks later) the row is streamed in
    # spans of SPAN ids: each cutoff by a 16-way search over the keys, one pass of the row a digit.
    row = tl.program_id(0).to(tl.int64)
    top_k = tl.load(params_ptr + row * 7 + 2).to(tl.int64)
    top_p = tl.load(params_ptr + row * 7 + 1)
    min_p = tl.load(params_ptr + row * 7 + 3)
    by_k = (top_k > 0) & (top_k < vocab)
    if by_k | (top_p < 1.0):
        slots = tl.arange(0, CHUNKS * CANDIDATES)
        cell = row * chunks + slots // CANDIDATES
        counts = tl.load(count_ptr + cell, mask=slots // CANDIDATES < chunks, other=0)
        real = slots % CANDIDATES < counts
        ids = tl.load(candidate_ptr + cell * CANDIDATES + slots % CANDIDATES, mask=real, other=0)
        z = tl.load(z_ptr + row * vocab + ids, mask=real, other=float("-inf"))
        weight = tl.load(w_ptr + row * vocab + ids, mask=real, other=0)
        key = _order_key(z)
        live = real & (z > float("-inf"))
        top = tl.max(tl.where(real, key, -4294967296), axis=0)
        first = slots == tl.min(tl.where(real & (key == top), slots, CHUNKS * CANDIDATES), axis=0)
        count = tl.where(by_k & (top_k < CANDIDATES), top_k, CANDIDATES)
        leading = _leading(key, live, count, count > 0)  # the row's first `count` ids (count >= 1)
        survivors = tl.where(by_k, leading, live)
        ordered = tl.where(survivors, weight, 0)
        total = tl.sum(tl.load(total_ptr + row * chunks + tl.arange(0, CHUNKS), mask=tl.arange(0, CHUNKS) < chunks,
                               other=0), axis=0)
        total = tl.where(by_k, tl.sum(ordered, axis=0), total)
        threshold = top_p.to(tl.float64) * total.to(tl.float64)
        leading_weight = tl.sum(tl.where(leading, weight, 0), axis=0).to(tl.float64)
        decided = tl.where(by_k, top_k <= CANDIDATES, leading_weight >= threshold)
        if decided:
            survivors &= _within_top_p(key, ordered, threshold, top_p < 1.0) | first
            e = tl.load(e_ptr + row * vocab + ids, mask=real, other=0.0)
            survivors &= (e >= min_p) | first
            kept = tl.where(survivors, weight, 0)
            tl.store(kept_ptr + row * vocab + ids, kept, mask=real & survivors)
            tl.atomic_add(block_sum_ptr + row * blocks + ids // BLOCK, kept, mask=real & survivors & (kept > 0))
        else:
            _stream_rank(z_ptr, e_ptr, w_ptr, kept_ptr, block_sum_ptr, row, vocab, blocks, top_k, top_p, min_p, by_k,
                         BLOCK, SPAN)


@triton.jit
def _stream_rank(z_ptr, e_ptr, w_ptr, kept_ptr, block_sum_ptr, row, vocab, blocks, top_k, top_p, min_p, by_k,
                 BLOCK: tl.constexpr, SPAN: tl.constexpr):
    # One row's rank stage streamed in spans of SPAN ids (a divisor of BLOCK). Each cutoff is found
    # 4 bits at a time: 16 candidate keys t_j = low + j * step, one pass counting (top-k) or summing
    # (top-p) over the row for all 16 at once, the search range narrowed to one step; 9 passes
    # reach a single key from the 2^32.
    j = tl.arange(0, 16).to(tl.int64)
    # top-k: the greatest key with top_k live ids at or above it, in [low, high]
    low = tl.full((), -2147483648, tl.int64)
    high = tl.full((), 2147483647, tl.int64)
    for _ in range(0, tl.where(by_k, 9, 0)):
        step = tl.maximum((high - low + 16) // 16, 1)
        t = low + j * step
        counts = tl.zeros((16,), tl.int64)
        for start in range(0, vocab, SPAN):
            ids = start + tl.arange(0, SPAN)
            z = tl.load(z_ptr + row * vocab + ids, mask=ids < vocab, other=float("-inf"))
            live = (ids < vocab) & (z > float("-inf"))
            counts += tl.sum((live[:, None] & (_order_key(z)[:, None] >= t[None, :])).to(tl.int64), axis=0)
        best = tl.max(tl.where((counts >= top_k) & (t <= high), j, 0), axis=0)
        low_next = low + best * step
        high = tl.minimum(low_next + step - 1, high)
        low = low_next
    cut_k = low
    above = tl.zeros((), tl.int64)
    for start in range(0, vocab, SPAN):
        ids = start + tl.arange(0, SPAN)
        z = tl.load(z_ptr + row * vocab + ids, mask=ids < vocab, other=float("-inf"))
        above += tl.sum(((ids < vocab) & (z > float("-inf")) & (_order_key(z) > cut_k)).to(tl.int64), axis=0)
    room = top_k - above
    # the top-k survivors' total and rank 0 (the greatest key's lowest id)
    total = tl.zeros((), tl.int64)
    ties = tl.zeros((), tl.int64)
    best_key = tl.full((), -4294967296, tl.int64)
    first_id = tl.full((), 0, tl.int64)
    for start in range(0, vocab, SPAN):
        ids = start + tl.arange(0, SPAN)
        key, chosen, ordered, n = _stream_ordered(z_ptr, w_ptr, row, ids, vocab, cut_k, room, ties, by_k)
        total += tl.sum(ordered, axis=0)
        ties += n
        top_here = tl.max(tl.where(ids < vocab, key, -4294967296), axis=0)
        first_here = tl.min(tl.where((ids < vocab) & (key == top_here), ids, vocab), axis=0).to(tl.int64)
        first_id = tl.where(top_here > best_key, first_here, first_id)
        best_key = tl.maximum(best_key, top_here)
    # top-p: the least key with less than the threshold above it, in [low, high] (2^31: no key, only
    # rank 0 survives); keys past `high` are below it too
    threshold = top_p.to(tl.float64) * total.to(tl.float64)
    low = tl.full((), -2147483648, tl.int64)
    high = tl.full((), 2147483648, tl.int64)
    for _ in range(0, tl.where(top_p < 1.0, 9, 0)):
        step = tl.maximum((high - low + 15) // 16, 1)
        t = low + j * step
        sums = tl.zeros((16,), tl.int64)
        ties = tl.zeros((), tl.int64)
        for start in range(0, vocab, SPAN):
            key, chosen, ordered, n = _stream_ordered(z_ptr, w_ptr, row, start + tl.arange(0, SPAN), vocab, cut_k,
                                                      room, ties, by_k)
            sums += tl.sum(tl.where(key[:, None] > t[None, :], ordered[:, None], 0), axis=0)
            ties += n
        below = (sums.to(tl.float64) < threshold) | (t > high)
        least = tl.min(tl.where(below, j, 16), axis=0)
        high = tl.minimum(low + least * step, high)
        low = tl.where(least > 0, low + (least - 1) * step + 1, low)
    cut_p = tl.minimum(low, high)  # no search at p >= 1: every id is above the least key
    # the weight above the top-p cutoff, then each span's survivors, kept weights and their sum,
    # added to its block's
    heavier = tl.zeros((), tl.int64)
    ties = tl.zeros((), tl.int64)
    for start in range(0, vocab, SPAN):
        key, chosen, ordered, n = _stream_ordered(z_ptr, w_ptr, row, start + tl.arange(0, SPAN), vocab, cut_k, room,
                                                  ties, by_k)
        heavier += tl.sum(tl.where(key > cut_p, ordered, 0), axis=0)
        ties += n
    ties = tl.zeros((), tl.int64)
    for start in range(0, vocab, SPAN):
        ids = start + tl.arange(0, SPAN)
        key, chosen, ordered, n = _stream_ordered(z_ptr, w_ptr, row, ids, vocab, cut_k, room, ties, by_k)
        ties += n
        tied = tl.where(key == cut_p, ordered, 0)
        before = heavier + tl.cumsum(tied, axis=0) - tied
        heavier += tl.sum(tied, axis=0)
        first = ids == first_id
        survivors = chosen & ((key > cut_p) | ((key == cut_p) & (before.to(tl.float64) < threshold)) | first)
        e = tl.load(e_ptr + row * vocab + ids, mask=ids < vocab, other=0.0)
        survivors &= (e >= min_p) | first
        kept = tl.where(survivors, tl.load(w_ptr + row * vocab + ids, mask=ids < vocab, other=0), 0)
        tl.store(kept_ptr + row * vocab + ids, kept, mask=ids < vocab)
        tl.atomic_add(block_sum_ptr + row * blocks + start // BLOCK, tl.sum(kept, axis=0))


@triton.jit
def _draw_kernel(kept_ptr, block_sum_ptr, params_ptr, seed_ptr, positions_ptr, greedy_ptr, out_ptr, vocab,
                 blocks, draw_index, BLOCK: tl.constexpr, BLOCKS: tl.constexpr, PDL: tl.constexpr):
    wait_for_prior(PDL)
    # program (row): the Philox word, the target, the block whose cumulative weight crosses it, then
    # the first id within that block whose cumulative kept weight exceeds the target
    row = tl.program_id(0).to(tl.int64)
    temperature = tl.load(params_ptr + row * 7 + 0)
    greedy = tl.load(greedy_ptr + row)
    b = tl.arange(0, BLOCKS)
    sums = tl.load(block_sum_ptr + row * blocks + b, mask=b < blocks, other=0)
    total = tl.sum(sums, axis=0)
    seed = tl.load(seed_ptr + row)
    offset = ((tl.load(positions_ptr + row).to(tl.int64) + 1) << 32) | draw_index
    word = tl.randint(seed, offset).to(tl.uint64)
    # target = (word * total) >> 32 without 64-bit overflow: total = hi * 2^32 + lo
    total_u = total.to(tl.uint64)
    hi = total_u >> 32
    lo = total_u & 0xFFFFFFFF
    target = (word * hi + ((word * lo) >> 32)).to(tl.int64)
    through = tl.cumsum(sums, axis=0)  # kept weight up to the end of each block
    crossing = tl.min(tl.where((through > target) & (b < blocks), b, BLOCKS), axis=0)
    crossing = tl.minimum(crossing, blocks - 1)
    before = tl.sum(tl.where(b < crossing, sums, 0), axis=0)
    ids = crossing * BLOCK + tl.arange(0, BLOCK)
    kept = tl.load(kept_ptr + row * vocab + ids, mask=ids < vocab, other=0)
    cumulative = tl.cumsum(kept, axis=0) + before
    found = tl.min(tl.where((cumulative > target) & (ids < vocab), ids, vocab), axis=0)
    sampled = tl.where(found < vocab, found, -1)
    result = tl.where(temperature > 0, sampled, greedy)
    result = tl.where(greedy >= 0, result, -1)
    tl.store(out_ptr + row, result)


@triton.jit
def _argmax_kernel(logits_ptr, out_ptr, vocab, BLOCK: tl.constexpr, PDL: tl.constexpr):
    wait_for_prior(PDL)
    row = tl.program_id(0).to(tl.int64)
    best = tl.full((), float("-inf"), tl.float32)
    best_id = tl.zeros((), tl.int32)
    for start in range(0, vocab, BLOCK):
        ids = start + tl.arange(0, BLOCK)
        inside = ids < vocab
        z = tl.load(logits_ptr + row * vocab + ids, mask=inside, other=float("-inf")).to(tl.float32)
        z = tl.where(z != z, float("-inf"), z)
        block_best = tl.max(z, axis=0)
        block_id = tl.min(tl.where((z == block_best) & inside, ids, vocab), axis=0)
        take = block_best > best
        best_id = tl.where(take, block_id, best_id)
        best = tl.maximum(best, block_best)
    tl.store(out_ptr + row, best_id)


def argmax(logits: torch.Tensor, out: torch.Tensor, *, block: int = 4096) -> None:
    """out[b] = the lowest index of row b's maximum (NaN never wins)."""
    rows, vocab = logits.shape
    _argmax_kernel[(rows,)](logits, out, vocab, BLOCK=min(block, triton.next_power_of_2(vocab)), **dependent(out))


class SamplerStorage:
    """The [rows, V] buffers of a device's samplers (and prompt scorers, `kernels/scores.py`), shared.
    A sampler's buffers are dead once its call returns (its kept weights and draws are read within
    it), and a device runs one plan at a time (one stream, one submission at a time), so the samplers
    of one `slot` (0, or 1 for the verifier's draft rows, whose kept weights are read together with its
    target rows': only those live in slot 1, the draft's scratch rows are slot 0's) can hold their
    buffers in one tensor of each name: as many rows as the largest of them, each sampler a view of
    its first rows. Without it each (rows, V) shape of a large vocabulary held its own, e.g. 8.7 MB
    a row of 151,936 ids in the chunked form with the sort beside it: gigabytes over a core's
    capacities. Grows while plans are lowered; `freeze` before graphs capture the addresses."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self._tensors: dict[tuple[int, str, torch.dtype, int], torch.Tensor] = {}
        self._frozen = False

    def rows(self, slot: int, name: str, dtype: torch.dtype, rows: int, vocab: int) -> torch.Tensor:
        """The first `rows` rows of buffer `name` of `slot` ([rows, vocab] of `dtype`, contiguous)."""
        key = (slot, name, dtype, vocab)
        tensor = self._tensors.get(key)
        if tensor is None or tensor.shape[0] < rows:
            if self._frozen:
                raise RuntimeError(f"sampler buffer {name!r} of slot {slot} needs {rows} rows after the storage "
                                   "was frozen (graphs hold its addresses): every sampler is made before capture")
            tensor = torch.zeros((rows, vocab), dtype=dtype, device=self.device)  # zeroed once, as the arena's
            self._tensors[key] = tensor
        return tensor[:rows]

    def freeze(self) -> None:
        """No buffer grows from here on (a captured graph holds their addresses)."""
        self._frozen = True

    @property
    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self._tensors.values())

    @property
    def rows_held(self) -> dict[tuple[int, str], int]:
        """(slot, buffer name) -> the rows the storage holds for it."""
        return {(slot, name): tensor.shape[0] for (slot, name, _, _), tensor in self._tensors.items()}


def row_buffer(name: str, dtype: torch.dtype, doc: str, rows: str = "rows", *, scratch: bool = False
               ) -> property:
    """A property: the owner's first `getattr(owner, rows)` rows of buffer `name` of its storage's
    `slot`, or of slot 0 for a `scratch` buffer (one no reader needs once the owner's call returns,
    so a sampler of any slot may overwrite another's)."""

    def get(self: Any) -> torch.Tensor:
        return self.storage.rows(0 if scratch else self.slot, name, dtype, getattr(self, rows), self.vocab)

    return property(get, doc=doc)


def row_groups(rows: int, group: int, buffers: tuple[torch.Tensor, ...]
               ) -> Iterator[tuple[slice, tuple[torch.Tensor, ...]]]:
    """`rows` rows `group` at a time (the last group partial): each group's rows, and the first rows of
    each of `buffers` (workspaces of `group` rows) that hold it."""
    for start in range(0, rows, group):
        stop = min(start + group, rows)
        yield slice(start, stop), tuple(buffer[:stop - start] for buffer in buffers)


class Sampler:
    """Static buffers and launches of `sample` for one (rows, vocab) shape on one device; its [rows, V]
    buffers are views into `storage` (its own where none is given)."""

    # What `kept_weights` returns, read after it (by `draw`, a verifier): `kept`, or `weights` where the
    # rank stage is off; the rest is scratch, in slot 0 whatever the sampler's slot.
    weights = row_buffer("weights", torch.int64, "[B, V] i64: floor(e * 2^24)")
    kept = row_buffer("kept", torch.int64, "[B, V] i64: kept weights in id order")
    z = row_buffer("z", torch.float32, "[B, V] f32: filtered, tempered logits", scratch=True)
    e = row_buffer("e", torch.float32, "[B, V] f32: exp(z - max)", scratch=True)
    # the torch sort's (the sort form, and the chunked form's beside it): a group of G = min(B,
    # SORT_ROWS) rows at a time
    sorted_z = row_buffer("sorted_z", torch.float32, "[G, V] f32, rank order", "sort_rows", scratch=True)
    order = row_buffer("order", torch.int64, "[G, V] i64: id at each rank", "sort_rows", scratch=True)
    ordered = row_buffer("ordered", torch.int64, "[G, V] i64: weights in rank order", "sort_rows", scratch=True)
    before = row_buffer("before", torch.int64, "[G, V] i64: exclusive cumulative weights", "sort_rows",
                        scratch=True)
    sorted_e = row_buffer("sorted_e", torch.float32, "[G, V] f32: e in rank order", "sort_rows", scratch=True)
    keep = row_buffer("keep", torch.bool, "[G, V] bool: kept in rank order", "sort_rows", scratch=True)

    def __init__(self, rows: int, vocab: int, device: torch.device | str, *, block: int = 4096,
                 rank_filters: RankFilters | None = None, rank_form: str | None = None, chunk: int | None = None,
                 candidates: int | None = None, span: int | None = None, storage: SamplerStorage | None = None,
                 slot: int = 0) -> None:
        self.rows, self.vocab, self.block = rows, vocab, min(block, triton.next_power_of_2(vocab))
        self.sort_rows = min(rows, SORT_ROWS)
        self.rank_filters = rank_filters if rank_filters is not None else RankFilters()
        self.storage = storage if storage is not None else SamplerStorage(device)
        self.slot = slot
        # the rank stage (module docstring, stage 2): "fused" (`_rank_kernel`, a row in one program's
        # registers), "chunked" (`_chunk_rank_kernel` and `_merge_rank_kernel`) or "sort" (torch)
        self.rank_form = rank_form or ("fused" if vocab <= FUSED_RANK_VOCAB else "chunked")
        if self.rank_form not in RANK_FORMS:
            raise ValueError(f"rank form {self.rank_form!r}: one of {', '.join(RANK_FORMS)}")
        if self.rank_form == "fused" and vocab > FUSED_RANK_VOCAB:
            raise ValueError(f"the fused rank stage holds at most {FUSED_RANK_VOCAB} ids a row, not {vocab}")
        self.blocks = triton.cdiv(vocab, self.block)
        self.blocks_pow2 = triton.next_power_of_2(self.blocks)
        self.block_max = torch.zeros((rows, self.blocks), dtype=torch.float32, device=device)
        self.block_id = torch.zeros((rows, self.blocks), dtype=torch.int32, device=device)
        self.block_sum = torch.zeros((rows, self.blocks), dtype=torch.int64, device=device)
        i64 = dict(dtype=torch.int64, device=device)
        self.greedy = torch.zeros((rows,), dtype=torch.int32, device=device)  # [B] i32
        buffers = ["z", "e", "weights", "kept"]
        if self.rank_form == "chunked":  # CHUNK ids a program, a whole number of blocks
            chunk = RANK_CHUNK if chunk is None else chunk
            candidates = RANK_CANDIDATES if candidates is None else candidates
            span = RANK_SPAN if span is None else span
            self.chunk = max(min(chunk, triton.next_power_of_2(vocab)), self.block)
            if self.chunk % self.block or self.chunk & (self.chunk - 1) or candidates & (candidates - 1) \
                    or self.block % min(span, self.block):
                raise ValueError(f"chunk {chunk}, candidates {candidates}, span {span} for blocks of {self.block}: "
                                 "powers of two, the chunk a multiple of the block and the span a divisor of it")
            self.candidates, self.span = candidates, min(span, self.block)
            self.chunks = triton.cdiv(vocab, self.chunk)
            self.candidate_count = torch.zeros((rows, self.chunks), dtype=torch.int32, device=device)
            self.candidate_ids = torch.zeros((rows, self.chunks, candidates), dtype=torch.int32, device=device)
            self.chunk_total = torch.zeros((rows, self.chunks), **i64)  # [B, chunks] i64: live weight a chunk
            self.rank_filters.sorts = True
        if self.rank_form in ("sort", "chunked"):  # the torch sort's static buffers (the chunked form's beside it)
            buffers += ["sorted_z", "order", "ordered", "before", "sorted_e", "keep"]
            self.rank = torch.arange(vocab, device=device).expand(self.sort_rows, vocab)  # [G, V] i64 (view)
            self.threshold = torch.zeros((self.sort_rows, 1), dtype=torch.float64, device=device)
        for name in buffers:  # sized now, while plans are lowered (the storage grows to the most rows)
            getattr(self, name)

    def __call__(self, logits: torch.Tensor, seed: torch.Tensor, positions: torch.Tensor, parameters: torch.Tensor,
                 histogram: torch.Tensor, grammar_mask: torch.Tensor, out: torch.Tensor, *, draw_index: int = 0
                 ) -> None:
        kept = self.kept_weights(logits, parameters, histogram, grammar_mask)
        self.draw(kept, parameters, seed, positions, out, draw_index=draw_index)

    def kept_weights(self, logits: torch.Tensor, parameters: torch.Tensor, histogram: torch.Tensor,
             grammar_mask: torch.Tensor, *, rank_stage: bool | None = None) -> torch.Tensor:
        """Stages 1 and 2: each row's kept weights, [rows, V] i64 in id order (a static buffer of this
        sampler), with their per-block sums in `block_sum` and the rows' greedy ids in `greedy` (-1:
        the mask allows nothing). `rank_stage` None: as the device's `RankFilters` switch says; True:
        the sampler's own rank form; False: none."""
        rows, vocab = self.rows, self.vocab
        grid = (rows, self.blocks)
        _filter_kernel[grid](logits, parameters, histogram, grammar_mask, self.z, self.block_max, self.block_id,
                             vocab, histogram.shape[1], grammar_mask.shape[1], self.blocks, BLOCK=self.block,
                             **dependent(logits))
        form = self.rank_filters.form if rank_stage is None else ("own" if rank_stage else "off")
        rank_stage = form != "off"
        _weights_kernel[grid](parameters, self.z, self.e, self.weights, self.block_max, self.block_id, self.greedy,
                              self.block_sum, vocab, self.blocks, BLOCK=self.block, BLOCKS=self.blocks_pow2,
                              RANK_STAGE=rank_stage, **dependent(logits))
        if not rank_stage:
            return self.weights
        if self.rank_form == "fused":
            width = triton.next_power_of_2(vocab)
            _rank_kernel[(rows,)](parameters, self.z, self.e, self.weights, self.kept, self.block_sum, vocab,
                                  self.blocks, BLOCK=self.block, BLOCKS=self.blocks_pow2, WIDTH=width,
                                  num_warps=16 if width > 4096 else 8, **dependent(logits))
            return self.kept
        if self.rank_form == "chunked" and form != "sort":
            buffers = (self.kept, self.block_sum, self.candidate_count, self.candidate_ids, self.chunk_total)
            _chunk_rank_kernel[(rows, self.chunks)](parameters, self.z, self.e, self.weights, self.block_max, *buffers,
                                                    vocab, self.blocks, self.chunks, BLOCK=self.block,
                                                    BLOCKS=self.blocks_pow2, CHUNK=self.chunk,
                                                    CANDIDATES=self.candidates,
                                                    num_warps=16 if self.chunk > 4096 else 8, **dependent(logits))
            width = triton.next_power_of_2(self.chunks) * self.candidates
            _merge_rank_kernel[(rows,)](parameters, self.z, self.e, self.weights, *buffers, vocab, self.blocks,
                                        self.chunks, BLOCK=self.block, CHUNKS=triton.next_power_of_2(self.chunks),
                                        CANDIDATES=self.candidates, SPAN=self.span,
                                        num_warps=16 if width > 4096 else 8, **dependent(logits))
            return self.kept
        kept = self._rank_stage(parameters)
        _block_sum_kernel[grid](kept, self.block_sum, vocab, self.blocks, BLOCK=self.block, **dependent(kept))
        return kept

    def draw(self, kept: torch.Tensor, parameters: torch.Tensor, seed: torch.Tensor, positions: torch.Tensor,
             out: torch.Tensor, *, draw_index: int = 0) -> None:
        """Stage 3 over `kept` (what `kept_weights` returned): each row's token, the greedy id at temperature <= 0."""
        _draw_kernel[(self.rows,)](kept, self.block_sum, parameters, seed, positions, self.greedy, out, self.vocab,
                                   self.blocks, int(draw_index), BLOCK=self.block, BLOCKS=self.blocks_pow2,
                                   **dependent(kept))

    def _rank_stage(self, parameters: torch.Tensor) -> torch.Tensor:
        """Top-k, top-p and min-p in rank order by torch sort, `sort_rows` rows at a time; the kept
        weights in id order."""
        vocab = self.vocab
        z, weights, e, kept = self.z, self.weights, self.e, self.kept
        buffers = (self.sorted_z, self.order, self.ordered, self.before, self.sorted_e, self.keep, self.rank,
                   self.threshold)
        for rows, (sorted_z, order, ordered, before, sorted_e, keep, rank, threshold) in row_groups(
                self.rows, self.sort_rows, buffers):
            torch.sort(z[rows], dim=1, descending=True, stable=True, out=(sorted_z, order))
            torch.gather(weights[rows], 1, order, out=ordered)
            torch.gt(sorted_z, float("-inf"), out=keep)
            top_k = parameters[rows, 2:3]
            # top-k (0 or >= V: disabled): rank < k
            keep &= (rank < top_k) | (top_k <= 0) | (top_k >= vocab)
            ordered.mul_(keep)
            torch.cumsum(ordered, dim=1, out=before)
            torch.mul(parameters[rows, 1:2].double(), before[:, -1:].double(), out=threshold)
            before.sub_(ordered)
            keep &= (before.double() < threshold) | (rank == 0)
            torch.gather(e[rows], 1, order, out=sorted_e)
            keep &= (sorted_e >= parameters[rows, 3:4]) | (rank == 0)
            ordered.mul_(keep)
            kept[rows].scatter_(1, order, ordered)
        return kept
