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
     block. Larger vocabularies take one stable descending torch sort over static buffers
     and the filters as torch operations (about thirty launches). A round none of whose sampling lanes filters by rank
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

import torch
import triton
import triton.language as tl

from helios.production.kernels.launch import dependent, wait_for_prior

WEIGHT_SCALE = float(2**24)
# The largest vocabulary whose rows `_rank_kernel` holds in one program's registers: 8,192 ids over
# 16 warps are 16 a thread; a larger one takes the torch sort (module docstring, stage 2).
FUSED_RANK_VOCAB = 8192


class RankFilters:
    """Whether the samplers of a device run the rank stage (2 above). One switch per device, read
    when a sampler launches: the executor clears it for a round without rank-filtered lanes, and
    on a GPU each sampling graph is captured once with it set and once cleared."""

    __slots__ = ("enabled",)

    def __init__(self) -> None:
        self.enabled = True


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
    bits = z.to(tl.int32, bitcast=True)
    bits = tl.where(bits == -2147483648, 0, bits)  # -0.0's bits (compared as integers: no float fold applies)
    key = (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(tl.int64)
    live = real & (z > float("-inf"))
    top = tl.max(tl.where(real, key, -4294967296), axis=0)
    first = ids == tl.min(tl.where(real & (key == top), ids, WIDTH), axis=0)  # rank 0
    # top-k: `cut`, the greatest key with k live ids at or above it; of the ids at it, the lowest
    # ids fill the k (no step runs without a top-k: every live id is above the initial cut)
    top_k = tl.load(params_ptr + row * 7 + 2).to(tl.int64)  # truncated, as the reference's int()
    cut = tl.full((), -2147483648, tl.int64)
    high = tl.full((), 2147483647, tl.int64)
    for _ in range(0, tl.where((top_k > 0) & (top_k < vocab), 32, 0)):
        middle = (cut + high + 1) >> 1
        enough = tl.sum((live & (key >= middle)).to(tl.int32), axis=0) >= top_k
        cut = tl.where(enough, middle, cut)
        high = tl.where(enough, high, middle - 1)
    above = live & (key > cut)
    tie = (live & (key == cut)).to(tl.int32)
    room = top_k - tl.sum(above.to(tl.int64), axis=0)
    survivors = above | ((tie > 0) & (tl.cumsum(tie, axis=0) - tie < room))
    # top-p: an id survives while the weight ranked before it is below p * total. `cut`, the least
    # key with less than that above it: every id above it survives (what precedes it is above `cut`
    # too), none below it does, and at it the weight before an id is that above plus its tie's
    # lower ids'. No step runs at p >= 1 (weights below the total are all above the initial cut;
    # ids past it weigh 0, kept or not)
    ordered = tl.where(survivors, weight, 0)
    top_p = tl.load(params_ptr + row * 7 + 1)
    threshold = top_p.to(tl.float64) * tl.sum(ordered, axis=0).to(tl.float64)
    cut = tl.full((), -2147483648, tl.int64)
    high = tl.full((), 2147483648, tl.int64)  # no key: only rank 0 survives (p = 0)
    for _ in range(0, tl.where(top_p < 1.0, 33, 0)):
        middle = (cut + high) >> 1
        below = tl.sum(tl.where(key > middle, ordered, 0), axis=0).to(tl.float64) < threshold
        high = tl.where(below, middle, high)
        cut = tl.where(below, cut, middle + 1)
    tied = tl.where(key == cut, ordered, 0)
    before = tl.sum(tl.where(key > cut, ordered, 0), axis=0) + tl.cumsum(tied, axis=0) - tied
    survivors &= (key > cut) | ((key == cut) & (before.to(tl.float64) < threshold)) | first
    survivors &= (e >= tl.load(params_ptr + row * 7 + 3)) | first  # min-p
    kept = tl.where(survivors, weight, 0)
    tl.store(kept_ptr + at, kept, mask=real)
    b = tl.arange(0, BLOCKS)
    block = tl.where(real, ids // BLOCK, BLOCKS)
    sums = tl.sum(tl.where(block[:, None] == b[None, :], kept[:, None], 0), axis=0)
    tl.store(block_sum_ptr + row * blocks + b, sums, mask=b < blocks)


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


class Sampler:
    """Static buffers and launches of `sample` for one (rows, vocab) shape on one device."""

    def __init__(self, rows: int, vocab: int, device: torch.device | str, *, block: int = 4096,
                 rank_filters: RankFilters | None = None, fused_rank: bool | None = None) -> None:
        self.rows, self.vocab, self.block = rows, vocab, min(block, triton.next_power_of_2(vocab))
        self.rank_filters = rank_filters if rank_filters is not None else RankFilters()
        # the rank stage in one launch (`_rank_kernel`), or by torch sort; None: fused where it fits
        self.fused_rank = vocab <= FUSED_RANK_VOCAB if fused_rank is None else fused_rank
        if self.fused_rank and vocab > FUSED_RANK_VOCAB:
            raise ValueError(f"the fused rank stage holds at most {FUSED_RANK_VOCAB} ids a row, not {vocab}")
        self.blocks = triton.cdiv(vocab, self.block)
        self.blocks_pow2 = triton.next_power_of_2(self.blocks)
        self.block_max = torch.zeros((rows, self.blocks), dtype=torch.float32, device=device)
        self.block_id = torch.zeros((rows, self.blocks), dtype=torch.int32, device=device)
        self.block_sum = torch.zeros((rows, self.blocks), dtype=torch.int64, device=device)
        f32 = dict(dtype=torch.float32, device=device)
        i64 = dict(dtype=torch.int64, device=device)
        self.z = torch.zeros((rows, vocab), **f32)  # [B, V] f32: filtered, tempered logits
        self.e = torch.zeros((rows, vocab), **f32)  # [B, V] f32: exp(z - max)
        self.weights = torch.zeros((rows, vocab), **i64)  # [B, V] i64: floor(e * 2^24)
        self.greedy = torch.zeros((rows,), dtype=torch.int32, device=device)  # [B] i32
        self.kept = torch.zeros((rows, vocab), **i64)  # [B, V] i64: kept weights in id order
        if not self.fused_rank:  # the torch sort's static buffers
            self.sorted_z = torch.zeros((rows, vocab), **f32)  # [B, V] f32, rank order
            self.order = torch.zeros((rows, vocab), **i64)  # [B, V] i64: id at each rank
            self.ordered = torch.zeros((rows, vocab), **i64)  # [B, V] i64: weights in rank order
            self.before = torch.zeros((rows, vocab), **i64)  # [B, V] i64: exclusive cumulative weights
            self.sorted_e = torch.zeros((rows, vocab), **f32)
            self.keep = torch.zeros((rows, vocab), dtype=torch.bool, device=device)
            self.rank = torch.arange(vocab, device=device).expand(rows, vocab)  # [B, V] i64 (view)
            self.threshold = torch.zeros((rows, 1), dtype=torch.float64, device=device)

    def __call__(self, logits: torch.Tensor, seed: torch.Tensor, positions: torch.Tensor, parameters: torch.Tensor,
                 histogram: torch.Tensor, grammar_mask: torch.Tensor, out: torch.Tensor, *, draw_index: int = 0
                 ) -> None:
        kept = self.kept_weights(logits, parameters, histogram, grammar_mask)
        self.draw(kept, parameters, seed, positions, out, draw_index=draw_index)

    def kept_weights(self, logits: torch.Tensor, parameters: torch.Tensor, histogram: torch.Tensor,
             grammar_mask: torch.Tensor, *, rank_stage: bool | None = None) -> torch.Tensor:
        """Stages 1 and 2: each row's kept weights, [rows, V] i64 in id order (a static buffer of this
        sampler), with their per-block sums in `block_sum` and the rows' greedy ids in `greedy` (-1:
        the mask allows nothing). `rank_stage` None: as the device's `RankFilters` switch says."""
        rows, vocab = self.rows, self.vocab
        grid = (rows, self.blocks)
        _filter_kernel[grid](logits, parameters, histogram, grammar_mask, self.z, self.block_max, self.block_id,
                             vocab, histogram.shape[1], grammar_mask.shape[1], self.blocks, BLOCK=self.block,
                             **dependent(logits))
        if rank_stage is None:
            rank_stage = self.rank_filters.enabled
        _weights_kernel[grid](parameters, self.z, self.e, self.weights, self.block_max, self.block_id, self.greedy,
                              self.block_sum, vocab, self.blocks, BLOCK=self.block, BLOCKS=self.blocks_pow2,
                              RANK_STAGE=rank_stage, **dependent(logits))
        if not rank_stage:
            return self.weights
        if self.fused_rank:
            width = triton.next_power_of_2(vocab)
            _rank_kernel[(rows,)](parameters, self.z, self.e, self.weights, self.kept, self.block_sum, vocab,
                                  self.blocks, BLOCK=self.block, BLOCKS=self.blocks_pow2, WIDTH=width,
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
        """Top-k, top-p and min-p in rank order by torch sort; the kept weights in id order."""
        vocab = self.vocab
        torch.sort(self.z, dim=1, descending=True, stable=True, out=(self.sorted_z, self.order))
        torch.gather(self.weights, 1, self.order, out=self.ordered)
        keep = self.keep
        torch.gt(self.sorted_z, float("-inf"), out=keep)
        top_k = parameters[:, 2:3]
        # top-k (0 or >= V: disabled): rank < k
        keep &= (self.rank < top_k) | (top_k <= 0) | (top_k >= vocab)
        self.ordered.mul_(keep)
        torch.cumsum(self.ordered, dim=1, out=self.before)
        torch.mul(parameters[:, 1:2].double(), self.before[:, -1:].double(), out=self.threshold)
        self.before.sub_(self.ordered)
        keep &= (self.before.double() < self.threshold) | (self.rank == 0)
        torch.gather(self.e, 1, self.order, out=self.sorted_e)
        keep &= (self.sorted_e >= parameters[:, 3:4]) | (self.rank == 0)
        self.ordered.mul_(keep)
        self.kept.scatter_(1, self.order, self.ordered)
        return self.kept
