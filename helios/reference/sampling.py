"""The sampling filters and the draw, in NumPy (host side): the definition `docs/sampling.md` states.

`sample_row` is a pure function of one row of logits, its sampling parameters, its histogram row,
its grammar-mask row and one Philox word; `sample` applies it to every row of a submission with
the counter `(position + 1, draw_index)`. FP32 throughout; the only non-FP32 arithmetic is exact
integer arithmetic on fixed-point weights and one IEEE float64 product (the top-p threshold).
"""

from __future__ import annotations

import numpy as np

from helios.reference.philox import randint, sampling_offset

WEIGHT_BITS = 24  # fixed-point weights: w = floor(exp(z - max) * 2^24), in [0, 2^24]
NO_TOKEN = -1  # the result when the grammar mask allows no token of the row

# Column order of the `parameters` input (helios.program.SAMPLING_PARAMETERS).
TEMPERATURE, TOP_P, TOP_K, MIN_P, REPETITION, PRESENCE, FREQUENCY = range(7)


def allowed_tokens(mask_words: np.ndarray, width: int) -> np.ndarray:
    """[width] bool from int32 bitmask words (llguidance layout: bit t % 32 of word t // 32)."""
    words = np.asarray(mask_words).astype(np.int32).view(np.uint32)
    ids = np.arange(width)
    return ((words[ids // 32] >> (ids % 32).astype(np.uint32)) & np.uint32(1)).astype(bool)


def penalize(logits: np.ndarray, counts: np.ndarray, parameters: np.ndarray) -> np.ndarray:
    """Step 1: repetition, then frequency, then presence penalties from the histogram counts."""
    z = np.where(np.isnan(logits), np.float32(-np.inf), logits).astype(np.float32)
    width = z.shape[0]
    c = np.zeros(width, dtype=np.int64)
    n = min(width, counts.shape[0])
    c[:n] = counts[:n]
    seen = c > 0
    r = np.float32(parameters[REPETITION])
    with np.errstate(divide="ignore", invalid="ignore"):  # a padding row's parameters may be all zero
        z = np.where(seen, np.where(z > 0, z / r, z * r), z).astype(np.float32)
    z = (z - np.float32(parameters[FREQUENCY]) * c.astype(np.float32)).astype(np.float32)
    z = (z - np.float32(parameters[PRESENCE]) * seen.astype(np.float32)).astype(np.float32)
    return z


def greedy(z: np.ndarray) -> int:
    """The lowest id among the largest values (NumPy's argmax returns the first maximum)."""
    return int(np.argmax(z))


def masked_logits(
    logits: np.ndarray,  # [V] f32
    parameters: np.ndarray,  # [7] f32, SAMPLING_PARAMETERS order
    counts: np.ndarray,  # [Vh] i32 histogram row
    mask_words: np.ndarray,  # [ceil(V / 32)] i32 grammar-mask row
) -> np.ndarray | None:
    """Steps 1 and 2 (penalties, then the grammar mask); None when the mask allows no id."""
    width = logits.shape[0]
    z = penalize(logits, counts, parameters)
    z = np.where(allowed_tokens(mask_words, width), z, np.float32(-np.inf)).astype(np.float32)
    return z if np.any(z > -np.inf) else None


def kept_weights(z: np.ndarray, temperature: float, top_k: float, top_p: float, min_p: float) -> np.ndarray:
    """Steps 4 to 7 over masked logits `z` (temperature > 0): the survivors' fixed-point weights
    (int64, 0 for every filtered id); their sum is the draw's total."""
    width = z.shape[0]
    z = (z / np.float32(temperature)).astype(np.float32)  # 4. temperature
    top = z.max()
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.where(z == top, np.float32(1.0), np.exp((z - top).astype(np.float32))).astype(np.float32)
    weights = np.floor(e * np.float32(2**WEIGHT_BITS)).astype(np.int64)
    ids = np.arange(width)
    order = np.lexsort((ids, -z))  # z descending, then id ascending
    rank = np.empty(width, dtype=np.int64)
    rank[order] = np.arange(width)
    survivors = z > -np.inf
    top_k = int(top_k)
    if 0 < top_k < width:  # 5. top-k
        survivors &= rank < top_k
    ordered = np.where(survivors, weights, 0)[order]  # 6. top-p
    before = np.cumsum(ordered) - ordered
    threshold = np.float64(np.float32(top_p)) * np.float64(int(ordered.sum()))
    survivors &= (before.astype(np.float64) < threshold)[rank] | (rank == 0)
    survivors &= (e >= np.float32(min_p)) | (rank == 0)  # 7. min-p
    return np.where(survivors, weights, 0).astype(np.int64)


def row_weights(z: np.ndarray, parameters: np.ndarray) -> np.ndarray:
    """The kept weights of a row's own sampling parameters (`kept_weights`, temperature > 0)."""
    return kept_weights(z, float(np.float32(parameters[TEMPERATURE])), float(parameters[TOP_K]),
                        float(parameters[TOP_P]), float(parameters[MIN_P]))


def draw(kept: np.ndarray, word: int) -> int:
    """Step 8: `target = (word * total) >> 32`, then the lowest id, in id order, whose inclusive
    cumulative kept weight exceeds it."""
    total = int(kept.sum())
    target = (int(word) * total) >> 32
    return int(np.searchsorted(np.cumsum(kept), target, side="right"))


def sample_row(
    logits: np.ndarray,  # [V] f32
    parameters: np.ndarray,  # [7] f32, SAMPLING_PARAMETERS order
    counts: np.ndarray,  # [Vh] i32 histogram row
    mask_words: np.ndarray,  # [ceil(V / 32)] i32 grammar-mask row
    word: int,  # one Philox uint32
) -> int:
    """One token id (or NO_TOKEN) by the filter order of docs/sampling.md."""
    z = masked_logits(logits, parameters, counts, mask_words)  # 1. penalties, 2. mask
    if z is None:
        return NO_TOKEN
    if not np.float32(parameters[TEMPERATURE]) > 0:  # 3. greedy
        return greedy(z)
    return draw(row_weights(z, parameters), word)  # 4.-8.


def sample(
    logits: np.ndarray,  # [B, V] f32
    seed: np.ndarray,  # [B] i64 seed bits
    positions: np.ndarray,  # [B] i32: the position of the row whose logits these are
    parameters: np.ndarray,  # [B, 7] f32
    histogram: np.ndarray,  # [B, Vh] i32
    grammar_mask: np.ndarray,  # [B, ceil(V / 32)] i32
    draw_index: int = 0,
) -> np.ndarray:
    """[B] i32 sampled ids; row b draws Philox word `randint(seed[b], (positions[b] + 1) << 32 | draw_index)`."""
    offsets = sampling_offset(np.asarray(positions, dtype=np.int64) + 1, draw_index)
    words = randint(np.asarray(seed, dtype=np.int64), offsets)
    out = np.empty(logits.shape[0], dtype=np.int32)
    for b in range(logits.shape[0]):
        out[b] = sample_row(logits[b], parameters[b], histogram[b], grammar_mask[b], int(words[b]))
    return out
